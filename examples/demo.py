"""The whole story: a replicated queue survives a broker crash, and Spark reads it.

1. A 3-broker in-process cluster (real time, background threads) with a topic
   of replication factor 3 and ``min_insync_replicas=2``.
2. A producer sends with ``acks="all"`` while the partition leader is killed
   (``stop_broker(clean=False)``: no flush, unsynced bytes dropped) mid-run;
   the controller elects a new leader from the ISR and the producer carries on.
3. A consumer reads everything back: every acknowledged record is there, at
   the offset it was acknowledged with. Then a real Kafka client - a
   confluent-kafka (librdkafka) consumer in a group of its own - reads the same
   records over the Kafka wire protocol from the cluster's listener
   (``listen="127.0.0.1:0"``, ``cluster.bootstrap_servers``) and agrees.
4. Exactly once over the Kafka protocol: a confluent-kafka transactional
   producer copies ``orders`` to ``invoices`` (consume, transform, produce, and
   the consumer group's offsets committed in the same transaction), then
   aborts a transaction; a read_committed pylog consumer sees every invoice
   exactly once and never the aborted record.
5. Spark reads the cluster directory (``spark.read.format("pylog")``), picking
   for each partition the replica with the highest high watermark, and counts
   the same records - and, with ``kafka.isolation.level=read_committed``, the
   committed invoices only.

Run: ./dev demo  (add --no-spark to skip step 5, e.g. without Java)
"""
from __future__ import annotations

import os
import sys
import tempfile
import time

import pylog


def replicated_queue(root: str) -> dict:
    cluster = pylog.Cluster(root, brokers=3, listen="127.0.0.1:0")   # also speaks the Kafka protocol
    try:
        cluster.create_topic("orders", partitions=2, replication_factor=3, min_insync_replicas=2)
        producer = cluster.producer(acks="all")
        acked: dict = {}
        victim = cluster.leader_of("orders", 0)
        started = time.monotonic()
        stalled = 0.0  # the longest single send: the one waiting for the failover
        for i in range(600):
            if i == 200:
                print(f"  killing broker {victim} (leader of orders-0) mid-run, without a clean shutdown")
                cluster.stop_broker(victim, clean=False)
            value = b"order-%d" % i
            t0 = time.monotonic()
            meta = producer.send("orders", value, key=b"customer-%d" % (i % 7)).result(timeout=30)
            stalled = max(stalled, time.monotonic() - t0)
            acked[(meta.partition, meta.offset)] = value
        total = time.monotonic() - started
        rest = max(total - stalled, 1e-9)
        # One send at a time (each waits for acks=all), so the rate is a latency figure, not throughput.
        print(f"  {len(acked)} records acknowledged (acks=all, one at a time) in {total:.1f}s: {stalled:.1f}s of it "
              f"one send waiting for the failover (the crash is detected after session_timeout_ms, 3 s), "
              f"the other {len(acked) - 1} at {(len(acked) - 1) / rest:,.0f} records/s")
        for info in cluster.describe("orders"):
            print(f"  partition {info.partition}: leader {info.leader}, epoch {info.leader_epoch}, "
                  f"isr {sorted(info.isr)}, high watermark {info.high_watermark}")
        print(f"  restarting broker {victim}; it truncates by leader epoch and catches up")
        cluster.start_broker(victim)

        consumer = cluster.consumer(group_id="billing", topics=["orders"])
        seen: dict = {}
        deadline = time.monotonic() + 30
        while len(seen) < len(acked) and time.monotonic() < deadline:
            for rec in consumer.poll(timeout=1.0):
                seen[(rec.partition, rec.offset)] = rec.value
        consumer.commit()
        lost = [k for k, v in acked.items() if seen.get(k) != v]
        assert not lost, f"acknowledged records lost or changed: {lost[:5]}"
        print(f"  consumer read all {len(acked)} acknowledged records at their acknowledged offsets")
        kafka_client_reads(cluster.bootstrap_servers, acked)
        print("4. exactly once: a confluent-kafka transactional producer copies orders to invoices")
        exactly_once_copy(cluster, acked)
        return acked
    finally:
        cluster.close()


def kafka_client_reads(bootstrap: str, acked: dict) -> None:
    """A real Kafka client (confluent-kafka, i.e. librdkafka) joins group "audit" and reads every record."""
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "audit", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe(["orders"])
    seen: dict = {}
    deadline = time.monotonic() + 60
    try:
        while len(seen) < len(acked) and time.monotonic() < deadline:
            for m in consumer.consume(1000, 1.0):
                if m.error() is None:
                    seen[(m.partition(), m.offset())] = m.value()
    finally:
        consumer.close()
    differ = [k for k, v in acked.items() if seen.get(k) != v]
    assert not differ and len(seen) == len(acked), f"the Kafka client saw other records: {differ[:5]}"
    print(f"  a confluent-kafka consumer (group 'audit') read the same {len(seen)} records over the Kafka "
          f"protocol from {bootstrap}")


def exactly_once_copy(cluster: "pylog.Cluster", acked: dict) -> None:
    """confluent-kafka's consume-transform-produce loop in transactions, one aborted transaction after it,
    and a read_committed pylog consumer that must see each invoice exactly once and nothing aborted."""
    from confluent_kafka import Consumer, Producer

    bootstrap = cluster.bootstrap_servers
    cluster.create_topic("invoices", partitions=2, replication_factor=3, min_insync_replicas=2)
    source = Consumer({"bootstrap.servers": bootstrap, "group.id": "copier", "auto.offset.reset": "earliest",
                       "enable.auto.commit": False, "isolation.level": "read_committed"})
    source.subscribe(["orders"])
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "copier-1"})
    producer.init_transactions(30)
    copied, transactions = 0, 0
    deadline = time.monotonic() + 60
    try:
        while copied < len(acked) and time.monotonic() < deadline:
            batch = [m for m in source.consume(250, 1.0) if m.error() is None]
            if not batch:
                continue
            producer.begin_transaction()
            for m in batch:
                producer.produce("invoices", m.value().replace(b"order", b"invoice"), m.key())
            producer.send_offsets_to_transaction(source.position(source.assignment()),
                                                 source.consumer_group_metadata(), 30)
            producer.commit_transaction(30)
            copied, transactions = copied + len(batch), transactions + 1
        producer.begin_transaction()
        producer.produce("invoices", b"never-seen")
        producer.abort_transaction(30)
    finally:
        source.close()
    reader = cluster.consumer(group_id="accounts", topics=["invoices"], isolation_level="read_committed")
    seen: list = []
    deadline = time.monotonic() + 30
    while len(seen) < len(acked) and time.monotonic() < deadline:
        seen += [r.value for r in reader.poll(timeout=1.0)]
    seen += [r.value for r in reader.poll(timeout=1.0)]  # anything after the last invoice (there must be none)
    reader.close()
    expected = sorted(v.replace(b"order", b"invoice") for v in acked.values())
    assert sorted(seen) == expected, f"read_committed saw {len(seen)} invoices, expected {len(expected)} exactly once"
    print(f"  {copied} records copied in {transactions} committed transactions, one transaction aborted; a "
          f"read_committed consumer saw {len(seen)} invoices, each once, and not the aborted record")


def spark_count(root: str, expected: int) -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import pylog.spark

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        pylog.spark.register(spark)
        df = spark.read.format("pylog").option("subscribe", "orders").load(root)
        counts = {r.partition: r["count"] for r in df.groupBy("partition").count().collect()}
        total = sum(counts.values())
        print(f"  Spark read {total} records from {root} (per partition: {dict(sorted(counts.items()))})")
        df.selectExpr("CAST(key AS STRING)", "CAST(value AS STRING)", "partition", "offset").orderBy(
            "partition", "offset").show(5)
        assert total == expected, f"Spark saw {total} records, expected {expected}"
        committed = (spark.read.format("pylog").option("subscribe", "invoices")
                     .option("kafka.isolation.level", "read_committed").load(root).count())
        print(f"  Spark read {committed} invoices with kafka.isolation.level=read_committed (the aborted one left out)")
        assert committed == expected, f"Spark saw {committed} committed invoices, expected {expected}"
    finally:
        spark.stop()


def main() -> None:
    root = tempfile.mkdtemp(prefix="pylog-demo-")
    print(f"1-3. replicated queue in {root}")
    acked = replicated_queue(root)
    if "--no-spark" not in sys.argv:
        print("5. Spark reads the cluster directory")
        spark_count(root, len(acked))
    print("done: nothing acknowledged was lost")


if __name__ == "__main__":
    main()
