"""Storage (Kafka's ``storage`` / ``log`` modules): partition logs on disk in Kafka's format.

Owns: the segment files (``.log``, ``.index``, ``.timeindex``, ``.txnindex``,
``.snapshot``), the log of one partition (:class:`~pylog.storage.local_log.LocalLog`
for segments, rolls, reads and deletion; :class:`~pylog.storage.log.Log` on top
of it for offsets, leader epochs, producer state, recovery and retention), the
log directory's checkpoints and layout (:mod:`~pylog.storage.logdir`), the
cleaner, and the file layer every byte goes through (:mod:`~pylog.storage.fileio`,
which tests replace to inject faults).

May import: :mod:`pylog.errors`, :mod:`pylog._version`, :mod:`pylog._native`
(typed bindings only, never ``ffi``/``lib``), :mod:`pylog.metrics` and
:mod:`pylog.record`. Never replication, runtime, clients or anything above
(``tests/unit/test_layering.py`` checks it).
"""
