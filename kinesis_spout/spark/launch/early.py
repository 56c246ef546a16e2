"""Opening the stream while the SparkSession starts (executor reads).

Creating the SparkSession takes seconds (the JVM starts), and all that while the
driver's Python waits on it and the Kinesis endpoint hears nothing. The reader of
executor reads needs no Spark, so :class:`EarlyReader` opens it meanwhile, in the
start-up's background thread (:func:`~kinesis_spout.spark.launch.startup.import_in_background`):
the stream described and its shards listed, the checkpoint store and the dead-letter
sink opened, the checkpoints loaded and the shards adopted, exactly as the micro-batch
loop would open it; then the iterator of every shard that may read (a GetShardIterator
each, :func:`~kinesis_spout.spark.read.opening.open_iterators`), so the first
micro-batch's read tasks go straight to GetRecords.

Opening the iterators pays only while the driver waits anyway: at 128 shards on moto
they take 0.9 s, more than they save the first micro-batch (0.3-0.6 s) when opened
after the session is up, so nothing opens them then. A failure here is logged, and
what was opened closed: the job opens the stream again once the session is up, and
meets the error there, reported as always. The job lease is held already (the shard
readers take none of their own).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from kinesis_spout.config import SpoutConfig
from kinesis_spout.metrics import MetricsCollector

if TYPE_CHECKING:
    from kinesis_spout.spark.read.streams import StreamPlanners

log = logging.getLogger(__name__)


class EarlyReader:
    """The executor-read reader of ``config``, opened off the main thread: call
    :meth:`open` there, then, after joining that thread, hand its :attr:`planners` to the
    loop (None: it did not open; the loop opens a reader of its own), or :meth:`close`
    it if the loop will not run."""

    def __init__(self, config: SpoutConfig, metrics: MetricsCollector | None) -> None:
        self.config = config
        self.metrics = metrics
        self._planners: StreamPlanners | None = None

    def open(self) -> None:
        """Open the reader and its shards' iterators (see the module docstring)."""
        from kinesis_spout.spark.read.opening import open_iterators
        from kinesis_spout.spark.read.planner import executor_read_spout
        from kinesis_spout.spark.read.streams import StreamPlanners

        started = time.perf_counter()
        reader = executor_read_spout(self.config, metrics=self.metrics, job_lease=False)
        try:
            reader.open()  # what it opened is closed again if it raises
        except Exception as exc:  # noqa: BLE001 - the loop's open meets it and says so
            log.debug("start-up: the stream did not open early: %s", exc)
            return
        opened = time.perf_counter()
        planners = StreamPlanners(reader)
        try:
            unopened = planners.unopened()
            done = open_iterators(unopened, self.config.poll_threads)
        except Exception:
            reader.close()
            raise
        self._planners = planners
        log.debug(
            "start-up: opened the stream while Spark started (%.2fs), and %d of %d shard "
            "iterators (%.2fs)",
            opened - started,
            done,
            len(unopened),
            time.perf_counter() - opened,
        )

    @property
    def planners(self) -> StreamPlanners | None:
        """The opened reader's planners (None: it did not open)."""
        return self._planners

    def close(self) -> None:
        """Close the reader if it opened (the job stops before its loop ran)."""
        planners, self._planners = self._planners, None
        if planners is not None:
            planners.spout.close()
