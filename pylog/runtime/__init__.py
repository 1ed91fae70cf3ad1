"""What drives the replication state machines: clocks, schedulers, transports, brokers.

Two flavours of everything: real time with one background event-loop thread,
and virtual time, single-threaded and reproducible from one seed.
"""
