"""pylog's version, in the lowest layer so that any module may read it (the C core's import check does)."""

__version__ = "0.1.0"
