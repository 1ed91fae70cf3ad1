"""pylog: an embeddable, single-process, Kafka-style commit log with a C core.

The public names of DESIGN.md section 4 live here. See README.md.
"""
from __future__ import annotations

__version__ = "0.1.0"

from pylog import errors  # noqa: E402
from pylog.errors import PylogError  # noqa: E402
from pylog.storage.log import AppendResult, Log, LogConfig  # noqa: E402
from pylog.storage.record import Record, RecordBatch  # noqa: E402

__all__ = ["__version__", "PylogError", "errors", "Log", "LogConfig", "AppendResult", "Record", "RecordBatch"]
