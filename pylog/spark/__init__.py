"""Spark integration: the ``pylog`` data source (Spark's Kafka-source schema over log directories).

>>> import pylog.spark                       # doctest: +SKIP
>>> pylog.spark.register(spark)              # doctest: +SKIP
>>> spark.read.format("pylog").option("path", "/data/logs").option("subscribe", "orders").load()  # doctest: +SKIP

Needs ``pip install 'pylog-kafka[spark]'`` (pyspark >= 4.2, pyarrow) and Java 17+.
Importing this package does not import pyspark; :func:`register` does.
See docs/spark.md.
"""
from __future__ import annotations

from typing import Any

__all__ = ["register", "NAME"]

NAME = "pylog"


def register(spark: Any) -> None:
    """Register the ``pylog`` data source with ``spark`` (a SparkSession).

    Executors import :mod:`pylog` themselves, so their Python (``PYSPARK_PYTHON``)
    must be one where pylog and pyarrow are installed.
    """
    from pylog.spark.datasource import PylogDataSource

    spark.dataSource.register(PylogDataSource)
