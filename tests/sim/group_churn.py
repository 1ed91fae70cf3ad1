"""Bookkeeping shared by the consumer-group churn tests: which sent records were acknowledged,
and draining the group until every one of them was delivered."""
from __future__ import annotations

from typing import Any, Iterable, List, Set, Tuple

from pylog.errors import PylogError

TP = Tuple[int, int]  # (partition, offset)


def harvest(pending: List[Any], acked: Set[TP]) -> None:
    """Move the finished send futures out of ``pending``; the acknowledged ones go to ``acked``."""
    for f in list(pending):
        if f.done():
            pending.remove(f)
            if f.exception() is None:
                m = f.result()
                acked.add((m.partition, m.offset))


def wait_for_sends(pending: List[Any], acked: Set[TP]) -> None:
    """Wait for every pending send (running virtual time), then :func:`harvest`: a send that failed
    was not acknowledged, so nobody owes its delivery."""
    for f in pending:
        try:
            f.result()
        except PylogError:
            pass
    harvest(pending, acked)


def drain(consumers: Iterable[Any], delivered: Set[TP], acked: Set[TP], *, commit: bool, rounds: int = 300) -> None:
    """Poll every consumer (committing after each poll when ``commit``) until every acknowledged
    record was delivered, or ``rounds`` rounds passed (the caller asserts what is missing)."""
    consumers = list(consumers)
    for _ in range(rounds):
        for cons in consumers:
            delivered.update((r.partition, r.offset) for r in cons.poll(0.05))
            if commit:
                cons.commit()
        if acked <= delivered:
            return
