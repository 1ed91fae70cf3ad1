"""Spark reads a pylog log directory with the schema and options of Spark's Kafka source.

Shows: writing two partitions with pylog, a batch read with ``subscribe`` and
specific ``startingOffsets``/``endingOffsets``, the same query a Kafka user
would write with ``format("kafka")``, a streaming read with
``trigger(availableNow=True)`` and ``maxOffsetsPerTrigger``, and the writer.

Needs ``pip install 'pylog-kafka[spark]'`` and Java 17+ (``java`` on PATH or
JAVA_HOME). Executors must run a Python where pylog is installed, hence
``PYSPARK_PYTHON`` below.

Run: .venv/bin/python examples/spark_read.py
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile

import pylog


def main() -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers need pylog and pyarrow
    from pyspark.sql import SparkSession

    import pylog.spark

    root = tempfile.mkdtemp(prefix="pylog-spark-")
    logs = os.path.join(root, "logs")
    for p in range(2):  # Kafka's layout: <log dir>/<topic>-<partition>
        with pylog.Log.open(os.path.join(logs, f"orders-{p}")) as log:
            log.append([pylog.Record(value=b'{"amount": %d}' % (10 * i + p), key=b"customer-%d" % (i % 3)) for i in range(5)])

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    pylog.spark.register(spark)

    # Batch: everything, exactly as with format("kafka") (plus the directory as path).
    df = spark.read.format("pylog").option("subscribe", "orders").load(logs)
    df.selectExpr("CAST(key AS STRING)", "CAST(value AS STRING)", "topic", "partition", "offset").show()

    # Specific offsets per partition: -2 is earliest, -1 latest; the end is exclusive.
    some = (
        spark.read.format("pylog").option("path", logs).option("subscribe", "orders")
        .option("startingOffsets", json.dumps({"orders": {"0": 2, "1": -2}}))
        .option("endingOffsets", json.dumps({"orders": {"0": -1, "1": 1}}))
        .load()
    )
    print("offsets 2.. of partition 0 and offset 0 of partition 1:",
          sorted((r.partition, r.offset) for r in some.select("partition", "offset").collect()))

    # Streaming: read what is there now, 4 offsets per micro-batch, then stop.
    out = os.path.join(root, "stream")
    q = (
        spark.readStream.format("pylog").option("path", logs).option("subscribe", "orders")
        .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "4").load()
        .selectExpr("partition", "offset", "CAST(value AS STRING) AS value")
        .writeStream.format("parquet").option("path", os.path.join(out, "data"))
        .option("checkpointLocation", os.path.join(out, "checkpoint"))
        .trigger(availableNow=True).start()
    )
    q.awaitTermination()
    print("micro-batch sizes:", [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]])

    # Writing: key/value rows appended to a topic (partition chosen by key, like Kafka).
    spark.createDataFrame([("a", "1"), ("b", "2")], "key string, value string").write.format("pylog") \
        .mode("append").option("topic", "replies").save(logs)
    print("replies:", spark.read.format("pylog").option("subscribe", "replies").load(logs).count(), "records")
    spark.stop()
    shutil.rmtree(root)


if __name__ == "__main__":
    main()
