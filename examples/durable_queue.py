"""The durable local queue: a producer process and a consumer process share one directory.

    python examples/durable_queue.py

1. A producer process opens the directory with ``pylog.open`` (the first
   process becomes its *owner*: it runs the broker) and sends jobs, printing
   each acknowledged offset.
2. A consumer process opens the same directory (it becomes a *client* of the
   owner, over a Unix socket), processes jobs and commits after each batch.
3. The consumer is killed with SIGKILL and restarted: it resumes at its
   committed offset (at-least-once: what it processed after its last commit
   comes again, nothing committed comes again, nothing is skipped).
4. The producer - the owner - is killed with SIGKILL: the consumer takes the
   directory over (crash recovery runs in it) and goes on consuming; every
   job the producer was told was written is there.

The script re-runs itself as ``durable_queue.py producer DIR`` and
``durable_queue.py consumer DIR``; those children talk to this parent through
lines on stdout.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import queue
from typing import Dict, List, Optional, Tuple

import pylog

TOPIC = "jobs"


# --------------------------------------------------------------- the children
def producer(path: str) -> None:
    q = pylog.open(path)
    if TOPIC not in q.store.topics:
        q.create_topic(TOPIC, partitions=1)
    p = q.producer(acks="all")
    print("role", q.role, flush=True)
    n = 0
    while True:  # until killed
        futures = [(f"job-{n + i}", p.send(TOPIC, f"job-{n + i}".encode())) for i in range(20)]
        n += 20
        for value, fut in futures:
            print("acked", fut.result().offset, value, flush=True)
        time.sleep(0.01)  # pace the demo so the parent can watch


def consumer(path: str) -> None:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    q = pylog.open(path)
    c = q.consumer("workers", [TOPIC], enable_auto_commit=False, session_timeout_ms=1500,
                   heartbeat_interval_ms=300)
    role = q.role
    print("role", role, flush=True)
    while not stop.is_set():
        records = c.poll(0.5, max_records=50)
        if q.role != role and q.role is not None:
            role = q.role
            print("role", role, flush=True)  # "owner": it took the directory over
        if not records:
            continue
        for r in records:
            print("processed", r.offset, r.value.decode(), flush=True)
        try:
            c.commit(timeout=5)
        except pylog.PylogError as exc:  # e.g. the owner died mid-commit: these come again (at-least-once)
            print("commit-failed", type(exc).__name__, flush=True)
            continue
        print("committed", records[-1].offset + 1, flush=True)
    c.close()
    q.close()
    print("closed", flush=True)


# ----------------------------------------------------------------- the parent
class Child:
    """A child process whose stdout lines arrive on a queue."""

    def __init__(self, role: str, path: str):
        self.role = role
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), role, path],
                                     stdout=subprocess.PIPE, text=True)
        self.lines: "queue.Queue[Optional[List[str]]]" = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.endswith("\n"):  # a line cut short by SIGKILL was never reported
                self.lines.put(line.rstrip("\n").split(maxsplit=2))
        self.lines.put(None)

    def next(self, timeout: float = 60.0) -> List[str]:
        line = self.lines.get(timeout=timeout)
        if line is None:
            raise SystemExit(f"the {self.role} process exited ({self.proc.wait()})")
        return line

    def rest(self) -> List[List[str]]:
        self.proc.wait(30)
        out = []
        while True:
            line = self.lines.get(timeout=30)
            if line is None:
                return out
            out.append(line)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)


class Ledger:
    """What the children reported: acknowledged jobs, processed jobs, commits."""

    def __init__(self) -> None:
        self.acked: Dict[int, str] = {}
        self.processed: Dict[int, str] = {}
        self.order: List[int] = []
        self.committed = 0

    def take(self, line: List[str]) -> None:
        if line[0] == "acked":
            self.acked[int(line[1])] = line[2]
        elif line[0] == "processed":
            self.processed[int(line[1])] = line[2]
            self.order.append(int(line[1]))
        elif line[0] == "committed":
            self.committed = int(line[1])


def watch(child: Child, ledger: Ledger, until, timeout: float = 60.0) -> List[str]:
    end = time.monotonic() + timeout
    while True:
        line = child.next(max(0.1, end - time.monotonic()))
        ledger.take(line)
        if until(line):
            return line


def main() -> Tuple[int, int]:
    root = tempfile.mkdtemp(prefix="pylog-queue-")
    path = os.path.join(root, "queue")
    ledger = Ledger()
    prod = cons = None
    try:
        prod = Child("producer", path)
        assert prod.next() == ["role", "owner"]
        watch(prod, ledger, lambda line: len(ledger.acked) >= 100)
        print(f"producer (owner, pid {prod.proc.pid}): {len(ledger.acked)} jobs acknowledged so far")

        cons = Child("consumer", path)
        assert cons.next() == ["role", "client"]
        watch(cons, ledger, lambda line: line[0] == "committed" and ledger.committed >= 60)
        watch(cons, ledger, lambda line: line[0] == "processed")  # processed, not yet committed
        last_commit = ledger.committed
        cons.kill()
        for line in cons.rest():
            ledger.take(line)
        last_commit = ledger.committed
        seen = max(ledger.processed)
        print(f"consumer killed (SIGKILL) after committing offset {last_commit}, having processed up to {seen}")

        cons = Child("consumer", path)
        assert cons.next() == ["role", "client"]
        first = int(watch(cons, ledger, lambda line: line[0] == "processed")[1])
        # The kill may land after a commit was stored but before it was printed: the restart
        # resumes at the stored commit, which is between the last printed one and what was processed.
        print(f"restarted consumer resumed at offset {first} (its committed offset)")
        assert last_commit <= first <= seen + 1, f"resumed at {first}: committed {last_commit}, processed to {seen}"

        watch(prod, ledger, lambda line: len(ledger.acked) >= 400)
        prod.kill()
        for line in prod.rest():
            if line[0] == "acked":
                ledger.take(line)
        print(f"producer (the owner) killed (SIGKILL) after {len(ledger.acked)} acknowledged jobs")
        watch(cons, ledger, lambda line: line == ["role", "owner"])
        print("the consumer took the directory over and keeps consuming")
        watch(cons, ledger, lambda line: all(o in ledger.processed for o in ledger.acked))
        cons.proc.send_signal(signal.SIGTERM)
        for line in cons.rest():
            ledger.take(line)

        lost = {o: v for o, v in ledger.acked.items() if ledger.processed.get(o) != v}
        assert not lost, f"acknowledged jobs never consumed: {sorted(lost)[:5]}"
        with pylog.Log.open(os.path.join(path, "broker-0", f"{TOPIC}-0"), read_only=True) as log:
            on_disk: Dict[int, str] = {}
            offset = log.log_start_offset
            while offset < log.log_end_offset:  # each read returns up to max_bytes from one position
                for r in log.read(offset):
                    on_disk[r.offset] = r.value.decode()
                    offset = r.offset + 1
        missing = {o: v for o, v in ledger.acked.items() if on_disk.get(o) != v}
        assert not missing, f"acknowledged jobs missing from the directory: {sorted(missing)[:5]}"
        redelivered = len(ledger.order) - len(set(ledger.order))
        print(f"all {len(ledger.acked)} acknowledged jobs are in the directory and were consumed "
              f"({redelivered} redelivered after the consumer crash: processed, not yet committed)")
        return len(ledger.acked), redelivered
    finally:
        for child in (prod, cons):
            if child is not None and child.proc.poll() is None:
                child.kill()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "producer":
        producer(sys.argv[2])
    elif len(sys.argv) == 3 and sys.argv[1] == "consumer":
        consumer(sys.argv[2])
    else:
        main()
