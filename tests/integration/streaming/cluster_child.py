"""Child process of the cluster test: a kinesis query whose driver runs here and
whose executors run on a standalone cluster (one SparkContext per process, so
not in the test process, which has a local one).

In batch ``PAUSE_IN`` the sink counts the rows, writes ``paused-<id>`` and waits
for ``resume`` (the test kills a worker meanwhile), then reads the rows: the
lost partitions are computed again by tasks that find their recorded ends.
Each batch is written to ``batch-<id>.json`` (idempotent by batch id); the
executors that read (``reader`` of the batch-end records) go to ``readers``.

Usage: python cluster_child.py CONF_JSON ENDPOINT STREAM CHECKPOINT SINK_DIR PAUSE_IN
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from streaming_helpers import Row, rid  # noqa: E402

from kinesis_spout.streaming import register  # noqa: E402


def main() -> None:
    conf, endpoint, stream, checkpoint, sink_dir, pause_in = sys.argv[1:7]
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("kinesis-cluster-child")
    for k, v in json.loads(conf).items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    register(spark)
    sink, store = Path(sink_dir), Path(f"{checkpoint}.store")

    def write(df: Any, batch_id: int) -> None:
        df = df.persist()
        try:
            n = df.count()
            if batch_id == int(pause_in) and not (sink / "resume").exists():
                (sink / f"paused-{batch_id}").write_text(str(n))
                deadline = time.monotonic() + 120
                while not (sink / "resume").exists() and time.monotonic() < deadline:
                    time.sleep(0.1)
            t = df.select("shardId", "sequenceNumber", "subSequenceNumber", "data").toArrow()
            rows = [
                Row(s, int(q), int(u), rid(d))
                for s, q, u, d in zip(*(t.column(i).to_pylist() for i in range(4)), strict=True)
            ]
            if len(rows) != n:
                raise AssertionError(f"batch {batch_id}: counted {n} rows, then read {len(rows)}")
            (sink / f"batch-{batch_id:06d}.json").write_text(json.dumps(rows))
            readers = {
                json.loads(p.read_text())["reader"] for p in store.rglob("*.batches/run-*/*/*.json")
            }
            with (sink / "readers").open("a") as fh:
                fh.writelines(f"{r}\n" for r in readers)
        finally:
            df.unpersist()

    q = (
        spark.readStream.format("kinesis")
        .option("streamName", stream)
        .option("endpointUrl", endpoint)
        .option("checkpointStore", f"file://{store}")
        .option("maxRecordsPerShard", "150")
        .load()
        .writeStream.foreachBatch(write)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
