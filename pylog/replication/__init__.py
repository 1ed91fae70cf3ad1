"""Sans-I/O replication state machines (DESIGN.md §1, §3).

Owns: the partition replica (HW, ISR, leader epochs, acks), the replica
manager (fetch sessions between broker pairs, purgatories), the controller and
its metadata store, the group coordinator and its ``__consumer_offsets``
records, the transaction coordinator and its ``__transaction_state`` records,
and the messages they exchange.

Nothing here opens sockets, starts threads, sleeps or reads the wall clock:
every entry point takes a request and ``now_ms`` and returns responses and
messages to send. :mod:`pylog.runtime` drives them. Disk access goes through
:mod:`pylog.storage` (its file layer) only.

May import: :mod:`pylog.errors`, :mod:`pylog._version`, :mod:`pylog.metrics`,
:mod:`pylog.record` and :mod:`pylog.storage`. Never runtime, clients or
anything above (``tests/unit/test_layering.py`` checks it).
"""
