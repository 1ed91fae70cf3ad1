"""Sans-I/O replication state machines (DESIGN.md §1, §3).

Nothing here opens sockets, starts threads, sleeps or reads the wall clock:
every entry point takes a request and ``now_ms`` and returns responses and
messages to send. :mod:`pylog.runtime` drives them.
"""
