"""Consumer groups: a cooperative-sticky group rebalancing incrementally while orders flow, a member
joining (only the partitions it needs move), a member crashing (its partitions go to the others after
its session times out), then the group as the admin API sees it: members, assignments, committed
offsets. Everything produced is processed at least once.

It runs on a simulated 3-broker cluster (virtual time, seed 7), so it takes about a second and prints
the same story every time.

Run: .venv/bin/python examples/consumer_groups.py
"""
from __future__ import annotations

import tempfile
from typing import Dict, List, Set, Tuple

import pylog

TP = Tuple[str, int]


class Listener:
    """Prints what a member is told when the group rebalances (kafka-python's listener names).

    Under the cooperative protocol a member hears only the partitions that change; as in Kafka,
    ``on_partitions_assigned`` is also called with an empty list after every rebalance (not printed).
    """

    def __init__(self, name: str) -> None:
        self.name = name

    def _say(self, what: str, parts: List[TP]) -> None:
        if parts:
            print(f"    {self.name}: {what} {sorted(p for _, p in parts)}")

    def on_partitions_revoked(self, parts: List[TP]) -> None:
        self._say("revoked ", parts)

    def on_partitions_assigned(self, parts: List[TP]) -> None:
        self._say("assigned", parts)

    def on_partitions_lost(self, parts: List[TP]) -> None:
        self._say("lost    ", parts)


def main() -> None:
    root = tempfile.mkdtemp(prefix="pylog-groups-")
    cluster = pylog.Cluster(root, brokers=3, seed=7)
    try:
        cluster.create_topic("orders", partitions=6, replication_factor=3, min_insync_replicas=2)
        producer = cluster.producer(acks="all")
        members: Dict[str, pylog.Consumer] = {}
        produced: Set[Tuple[int, int]] = set()
        processed: Set[Tuple[int, int]] = set()
        count = [0]

        def join(name: str) -> None:
            print(f"  {name} joins")
            members[name] = cluster.consumer(
                "billing", ["orders"], client_id=name, partition_assignment_strategy="cooperative-sticky",
                rebalance_listener=Listener(name), session_timeout_ms=6_000, heartbeat_interval_ms=1_000,
                enable_auto_commit=False)

        def run(rounds: int) -> None:
            """Produce a few orders, let every member poll, process and commit."""
            for _ in range(rounds):
                for _ in range(6):
                    count[0] += 1
                    meta = producer.send("orders", b"order-%d" % count[0], key=b"customer-%d" % (count[0] % 10))
                    m = meta.result()
                    produced.add((m.partition, m.offset))
                for consumer in list(members.values()):
                    records = consumer.poll(0.2)
                    processed.update((r.partition, r.offset) for r in records)
                    if records:
                        try:
                            consumer.commit()
                        except pylog.PylogError:  # a rebalance is under way: these are redelivered
                            pass

        def owners() -> str:
            return ", ".join(f"{n}={sorted(p for _, p in c.assignment())}" for n, c in members.items())

        print("1. one member takes every partition")
        join("alice")
        run(10)
        print(f"   {owners()}")

        print("2. bob joins: cooperative-sticky moves only what bob needs; alice keeps the rest")
        join("bob")
        run(15)
        print(f"   {owners()}")

        print("3. carol joins")
        join("carol")
        run(15)
        print(f"   {owners()}")

        print("4. bob's process dies (no LeaveGroup): after his session times out, the others take over")
        members.pop("bob")._crash()  # a testing hook: the member vanishes like a killed process
        run(5)
        cluster.advance(7_000)  # virtual time: past bob's 6 s session timeout (the others keep heartbeating)
        run(15)
        print(f"   {owners()}")

        print("5. the group through the admin API")
        desc = cluster.describe_group("billing")
        print(f"   state={desc.state} protocol={desc.protocol} generation={desc.generation}")
        for m in desc.members:
            print(f"   member {m.client_id}: partitions {sorted(p for _, p in m.assignment)}")
        offsets = cluster.list_group_offsets("billing")
        print(f"   committed: {dict(sorted((p, o.offset) for (_, p), o in offsets.items()))}")

        for _ in range(50):  # read what is left
            if produced <= processed:
                break
            run(0)
            for consumer in members.values():
                processed.update((r.partition, r.offset) for r in consumer.poll(0.2))
        missing = produced - processed
        print(f"{len(produced)} orders produced, {len(processed & produced)} processed at least once, "
              f"{len(missing)} missing")
        if missing:
            raise SystemExit(f"records never processed: {sorted(missing)[:10]}")
        for consumer in members.values():
            consumer.close()
        producer.close()
    finally:
        cluster.close()


if __name__ == "__main__":
    main()
