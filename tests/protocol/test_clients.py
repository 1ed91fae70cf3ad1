"""Real Kafka clients against a pylog cluster: kafka-python, confluent-kafka, aiokafka.

Each client: topics created through its admin client, produce with acks 0/1/all,
every compression codec, idempotence on; reads by assign + seek (a mid-batch
offset), ``offsets_for_times``. What is read back is compared with what the
client's delivery reports said and with pylog's own view of the partition.
"""
from __future__ import annotations

import asyncio
import time


CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def _pylog_values(cluster, topic, partition):
    """(offset, value) of every record below the HW, read by pylog's in-process consumer."""
    c = cluster.consumer()
    try:
        c.assign([(topic, partition)])
        c.seek(topic, partition, 0)
        out = {}
        hw = cluster.describe(topic)[partition].high_watermark
        deadline = time.monotonic() + 30
        while len(out) < hw and time.monotonic() < deadline:
            for r in c.poll(timeout=0.5):
                out[r.offset] = r.value
        return out
    finally:
        c.close()


# ------------------------------------------------------------ kafka-python
def test_kafka_python(kcluster):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic

    bs = kcluster.bootstrap_servers
    admin = KafkaAdminClient(bootstrap_servers=bs)
    try:
        admin.create_topics([NewTopic("kp", 2, 3)])
    finally:
        admin.close()
    assert [i.replicas.__len__() for i in kcluster.describe("kp")] == [3, 3]
    sent = {}  # (partition, offset) -> value
    t_before = int(time.time() * 1000) - 1
    for acks in (0, 1, "all"):
        for codec in CODECS:
            p = KafkaProducer(bootstrap_servers=bs, acks=acks, compression_type=None if codec == "none" else codec,
                              enable_idempotence=acks == "all", linger_ms=2)
            try:
                futs = [(p.send("kp", f"{acks}-{codec}-{i}".encode(), partition=i % 2), f"{acks}-{codec}-{i}".encode())
                        for i in range(40)]
                p.flush()
                for f, v in futs:
                    md = f.get(timeout=30)
                    if acks != 0:
                        sent[(md.partition, md.offset)] = v
            finally:
                p.close()
    for part in (0, 1):
        assert kcluster.describe("kp")[part].high_watermark == 5 * 3 * 20
        mine = _pylog_values(kcluster, "kp", part)
        for (pp, off), v in sent.items():
            if pp == part:
                assert mine[off] == v
    c = KafkaConsumer(bootstrap_servers=bs, enable_auto_commit=False, consumer_timeout_ms=5000)
    try:
        tp = TopicPartition("kp", 0)
        c.assign([tp])
        c.seek(tp, 7)  # inside a batch: the whole batch is fetched, the client skips 0..6
        got = [(m.offset, m.value) for m in c]
        assert got[0][0] == 7 and [o for o, _ in got] == list(range(7, 300))
        assert all(sent[(0, o)] == v for o, v in got if (0, o) in sent)
        ts = c.offsets_for_times({tp: t_before})[tp]
        assert ts.offset == 0
        assert c.offsets_for_times({tp: int(time.time() * 1000) + 3_600_000})[tp] is None
        assert c.end_offsets([tp])[tp] == 300 and c.beginning_offsets([tp])[tp] == 0
    finally:
        c.close()


# ---------------------------------------------------------- confluent-kafka
def test_confluent_kafka(kcluster):
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    bs = kcluster.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bs})
    for f in admin.create_topics([NewTopic("ck", 2, 3)]).values():
        assert f.result(30) is None
    sent = {}
    errors = []
    t_before = int(time.time() * 1000) - 1
    for acks in ("0", "1", "all"):
        for codec in CODECS:
            conf = {"bootstrap.servers": bs, "acks": acks, "compression.type": codec, "linger.ms": 2}
            if acks == "all":
                conf["enable.idempotence"] = True
            p = Producer(conf)

            def report(err, msg):
                if err is not None:
                    errors.append(err)
                elif acks != "0":
                    sent[(msg.partition(), msg.offset())] = msg.value()

            for i in range(40):
                p.produce("ck", f"{acks}-{codec}-{i}".encode(), partition=i % 2, on_delivery=report)
            assert p.flush(30) == 0
    assert errors == []
    assert len(sent) == 2 * 5 * 40
    for part in (0, 1):
        assert kcluster.describe("ck")[part].high_watermark == 300
    c = Consumer({"bootstrap.servers": bs, "group.id": "unused", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition("ck", 1, 11)])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 300 - 11 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None:
                assert m.error() is None, m.error()
                got.append((m.offset(), m.value()))
        assert [o for o, _ in got] == list(range(11, 300))  # read_committed (librdkafka's default) sees all: LSO = HW
        assert all(sent[(1, o)] == v for o, v in got if (1, o) in sent)
        (found,) = c.offsets_for_times([TopicPartition("ck", 1, t_before)], 10)
        assert found.offset == 0
        assert c.get_watermark_offsets(TopicPartition("ck", 1), 10) == (0, 300)
    finally:
        c.close()


# ------------------------------------------------------------------ aiokafka
def test_aiokafka(kcluster):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    bs = kcluster.bootstrap_servers

    async def main():
        admin = AIOKafkaAdminClient(bootstrap_servers=bs)
        await admin.start()
        try:
            await admin.create_topics([NewTopic("ak", 2, 3)])
        finally:
            await admin.close()
        sent = {}
        t_before = int(time.time() * 1000) - 1
        for acks in (0, 1, "all"):
            for codec in CODECS:
                p = AIOKafkaProducer(bootstrap_servers=bs, acks=acks, enable_idempotence=acks == "all",
                                     compression_type=None if codec == "none" else codec, linger_ms=2)
                await p.start()
                try:
                    futs = [(await p.send("ak", f"{acks}-{codec}-{i}".encode(), partition=i % 2),
                             f"{acks}-{codec}-{i}".encode()) for i in range(40)]
                    for f, v in futs:
                        md = await f
                        if acks != 0:
                            sent[(md.partition, md.offset)] = v
                finally:
                    await p.stop()
        c = AIOKafkaConsumer(bootstrap_servers=bs, enable_auto_commit=False)
        await c.start()
        try:
            tp = TopicPartition("ak", 0)
            c.assign([tp])
            c.seek(tp, 5)
            got = []
            deadline = time.monotonic() + 30
            while len(got) < 295 and time.monotonic() < deadline:
                for msgs in (await c.getmany(timeout_ms=500)).values():
                    got += [(m.offset, m.value) for m in msgs]
            found = (await c.offsets_for_times({tp: t_before}))[tp]
            end = (await c.end_offsets([tp]))[tp]
        finally:
            await c.stop()
        return sent, got, found, end

    sent, got, found, end = asyncio.run(main())
    assert len(sent) == 2 * 5 * 40
    assert [o for o, _ in got] == list(range(5, 300))
    assert all(sent[(0, o)] == v for o, v in got if (0, o) in sent)
    assert found.offset == 0 and end == 300
