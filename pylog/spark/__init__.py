"""Spark integration: the ``pylog`` data source (Spark's Kafka-source schema over log directories).

>>> import pylog.spark                       # doctest: +SKIP
>>> pylog.spark.register(spark)              # doctest: +SKIP
>>> spark.read.format("pylog").option("path", "/data/logs").option("subscribe", "orders").load()  # doctest: +SKIP

Needs ``pip install 'pylog-kafka[spark]'`` (pyspark >= 4.2, pyarrow) and Java 17+.
Importing this package does not import pyspark; :func:`register` does.
See docs/spark.md.
"""
from __future__ import annotations

from typing import Any, Sequence

__all__ = ["register", "check_executor_imports", "NAME"]

NAME = "pylog"


def register(spark: Any, check_executors: bool = True) -> None:
    """Register the ``pylog`` data source with ``spark`` (a SparkSession).

    Executors import :mod:`pylog` themselves, so their Python (``PYSPARK_PYTHON``)
    must be one where pylog and pyarrow are installed. With
    ``check_executors`` (the default) one tiny Spark job (a Python UDF on one
    row, about a second once Python workers run) imports them there first
    and raises :class:`~pylog.errors.InvalidConfigurationError` saying which
    Python the executors run and how to fix it, instead of a
    ``ModuleNotFoundError`` deep in a Java stack trace at the first query.
    """
    from pylog.spark.datasource import PylogDataSource

    if check_executors:
        check_executor_imports(spark)
    spark.dataSource.register(PylogDataSource)


#: what executors must be able to import for the source and the sink to run there
EXECUTOR_MODULES = ("pylog", "pylog._native", "pyarrow")


def check_executor_imports(spark: Any, modules: Sequence[str] = EXECUTOR_MODULES) -> None:
    """Import ``modules`` in an executor's Python; raise InvalidConfigurationError naming what failed.

    Also compares the executors' ``pylog.__version__`` with the driver's (a
    mismatch is an error: the two halves of the source must agree).
    Thread-safety: as the SparkSession. Complexity: one single-task job.
    """
    import json
    import sys

    from pyspark.sql.functions import udf

    from pylog._version import __version__
    from pylog.errors import InvalidConfigurationError

    wanted = list(modules)

    def probe() -> str:  # runs on an executor; pickled by value (it imports nothing from pylog to load)
        import importlib
        import sys as _sys

        out = []
        for name in wanted:
            try:
                mod = importlib.import_module(name)
                out.append([name, str(getattr(mod, "__version__", "")), None])
            except BaseException as exc:  # noqa: BLE001 - reported to the driver, whatever it is
                out.append([name, None, f"{type(exc).__name__}: {exc}"])
        return json.dumps({"python": _sys.executable, "version": list(_sys.version_info[:3]), "modules": out})

    probe.__module__ = "__main__"  # cloudpickle: ship the function itself, not a reference into pylog
    answer = spark.range(1).select(udf(probe, "string", useArrow=False)()).first()[0]
    got = json.loads(answer)
    failed = [(n, err) for n, _v, err in got["modules"] if err is not None]
    exe = got["python"]
    fix = (
        f"Fix: install pylog and pyarrow into that Python (pip install 'pylog-kafka[spark]'), or start the SparkSession "
        f"with executors running a Python that has them: set the environment variable PYSPARK_PYTHON (e.g. "
        f"os.environ['PYSPARK_PYTHON'] = sys.executable, here {sys.executable}) or the Spark conf "
        f"spark.pyspark.python before the session starts"
    )
    if failed:
        what = "; ".join(f"{n}: {err}" for n, err in failed)
        raise InvalidConfigurationError(
            f"Spark executors cannot import what the pylog data source needs (executor Python {exe}, "
            f"{'.'.join(map(str, got['version']))}): {what}. {fix}"
        )
    versions = {n: v for n, v, _e in got["modules"]}
    if "pylog" in versions and versions["pylog"] != __version__:
        raise InvalidConfigurationError(
            f"Spark executors run pylog {versions['pylog']} ({exe}) but the driver runs pylog {__version__} "
            f"({sys.executable}): install the same version on both. {fix}"
        )
