"""The ``pylog_kafka`` pytest fixture (pylog's pytest plugin): unchanged Kafka client code works."""
from __future__ import annotations


def test_pylog_kafka_fixture(pylog_kafka):
    from kafka import KafkaConsumer, KafkaProducer

    producer = KafkaProducer(bootstrap_servers=pylog_kafka.bootstrap_servers, acks="all")
    assert producer.send("orders", b"o1").get(timeout=30).offset == 0  # auto-created
    producer.close()
    consumer = KafkaConsumer("orders", bootstrap_servers=pylog_kafka.bootstrap_servers, auto_offset_reset="earliest",
                             consumer_timeout_ms=30000, group_id=None)
    assert next(consumer).value == b"o1"
    consumer.close()
    assert len(pylog_kafka.bootstrap_servers.split(",")) == 3
