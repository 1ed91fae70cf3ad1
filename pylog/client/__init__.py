"""The in-process clients (Kafka's ``clients`` module): producer, consumer with groups, group admin.

Owns: :class:`~pylog.client.producer.Producer` and :class:`~pylog.client.consumer.Consumer`
(facades built from one-concept parts: ``buffer_pool``/``sender``/``accumulator`` and
``subscription``/``fetcher``/``consumer_coordinator``), their option dataclasses
(``config``), the assignors, the partitioner, the group admin and the small value
types (docs/design.md lists every module).

May import: ``pylog.errors``, ``pylog.metrics``, ``pylog._native`` (the C send path only),
``pylog.storage`` (the record format and compression), ``pylog.replication`` (the request and
response messages), ``pylog.runtime`` (scheduler, transport). Never a facade
(``pylog.cluster``, ``pylog.shared``) or anything above: a client reaches its cluster only
through the object passed to it (tests/unit/test_layering.py checks this).

Complexity, durability and thread-safety: stated per module.
"""
