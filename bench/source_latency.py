"""Idle and latency figures of the streaming source, for ``bench/source_bench.py``.

* ``idle_batch_ms_p50``: a query on a stream that gets no new records; the
  micro-batches it still runs (each shard's read found its tip, rested
  ``idle_poll_interval``, and a batch looked again) take this wall time each,
  from Spark's own progress (``triggerExecution`` of batches with no rows);
* ``put_to_row_ms_p50``: records put at a steady low rate while the query runs;
  for each row, the time from its Kinesis arrival timestamp to the moment the
  foreachBatch sink sees it.
"""

from __future__ import annotations

import statistics
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kinesis_spout.testing.streams import create_stream, put_records


def _query(spark: Any, endpoint: str, stream: str, workdir: Path, sink: Any) -> Any:
    ck = workdir / f"latency-{uuid.uuid4().hex[:8]}"
    return (
        spark.readStream.format("kinesis")
        .option("streamName", stream)
        .option("endpointUrl", endpoint)
        .option("checkpointStore", f"file://{ck}.store")
        .option("initialPosition", "latest")
        .load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(ck))
        .start()
    )


def latency_figures(
    spark: Any, client: Any, endpoint: str, workdir: Path, seconds: float = 12.0, rate: float = 20
) -> dict[str, Any]:
    """Both figures of the module docstring, on a fresh 4-shard stream."""
    stream = f"latency-{uuid.uuid4().hex[:6]}"
    create_stream(client, stream, 4)
    delays: list[float] = []

    def sink(df: Any, batch_id: int) -> None:
        seen = datetime.now(UTC)
        for row in df.select("approximateArrivalTimestamp").collect():
            arrival = row[0]
            if arrival is not None:
                arrival = arrival if arrival.tzinfo else arrival.replace(tzinfo=UTC)
                delays.append((seen - arrival).total_seconds() * 1000)

    query = _query(spark, endpoint, stream, workdir, sink)
    try:
        time.sleep(3.0)  # started, idle: the batches now are batches with no new data
        idle = _idle_batches(query)
        stop = threading.Event()
        putter = threading.Thread(target=_put_steadily, args=(client, stream, rate, stop))
        putter.start()
        time.sleep(seconds)
        stop.set()
        putter.join()
        time.sleep(2.0)  # the last records reach the sink
    finally:
        _stop_between_batches(query)
    if not delays:
        raise RuntimeError("no record reached the sink in the latency run")
    return {
        "idle_batch_ms_p50": round(statistics.median(idle), 1) if idle else None,
        "idle_batches": len(idle),
        "put_to_row_ms_p50": round(statistics.median(delays), 1),
        "put_to_row_ms_p90": round(statistics.quantiles(delays, n=10)[-1], 1),
        "latency_records": len(delays),
        "latency_rate_per_s": rate,
    }


def _stop_between_batches(query: Any, timeout: float = 10.0) -> None:
    """Stop the query while no batch runs (stopping inside one interrupts its sink)."""
    deadline = time.monotonic() + timeout
    while query.status.get("isTriggerActive") and time.monotonic() < deadline:
        time.sleep(0.01)
    query.stop()


def _idle_batches(query: Any) -> list[float]:
    """triggerExecution ms of the micro-batches that ran and had no rows."""
    out = []
    for p in query.recentProgress:
        durations = p.durationMs or {}
        if p.numInputRows == 0 and "addBatch" in durations:
            out.append(float(durations.get("triggerExecution", 0)))
    return out


def _put_steadily(client: Any, stream: str, rate: float, stop: threading.Event) -> None:
    i = 0
    while not stop.is_set():
        put_records(client, stream, [(f"pk-{i}", b"latency|" + str(i).encode())])
        i += 1
        stop.wait(1.0 / rate)
