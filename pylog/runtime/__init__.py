"""What drives the replication state machines: clocks, schedulers, transports, brokers.

Two flavours of everything: real time with one background event-loop thread,
and virtual time, single-threaded and reproducible from one seed. Also owns
the declared seam between a cluster facade and its clients
(:mod:`~pylog.runtime.cluster_context`).

May import: every floor below it (errors, ``_native`` bindings, metrics,
record, storage, replication). Never clients, the protocol listener or the
facades (``tests/unit/test_layering.py`` checks it).
"""
