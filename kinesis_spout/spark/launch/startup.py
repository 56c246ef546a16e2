"""Where a job's start-up time goes, said in one DEBUG line.

A bare ``spark-submit`` of an empty PySpark job takes several seconds; the
job's own share (its imports, config, job lease, opening the stream, the
first plan and the first micro-batch's job) should stay well under one
second of it. ``kinesis-spout run -v`` prints, once the first micro-batch is
back::

    startup: imports 0.35s | config 0.01s | lease 0.00s | spark session 4.10s | ...

Each phase is the time since the previous mark (the first since
``started``: the entry point's first line, or the driver's creation).
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kinesis_spout.spark.read.plan import ReadSettings

log = logging.getLogger(__name__)


class StartupTimes:
    """Named phases of a start, each the time since the previous one."""

    def __init__(
        self, started: float | None = None, clock: Callable[[], float] = time.perf_counter
    ) -> None:
        self._clock = clock
        self._started = clock() if started is None else started
        self._last = self._started
        self.phases: list[tuple[str, float]] = []
        self.finished = False

    def mark(self, phase: str) -> None:
        """``phase`` ended now (ignored once the start is finished)."""
        if self.finished:
            return
        now = self._clock()
        self.phases.append((phase, now - self._last))
        self._last = now

    def finish(self, phase: str) -> None:
        """The last phase ended: say the whole start at DEBUG, once."""
        if self.finished:
            return
        self.mark(phase)
        self.finished = True
        log.debug("%s", self.line())

    @property
    def total(self) -> float:
        return self._last - self._started

    def line(self) -> str:
        parts = " | ".join(f"{name} {seconds:.2f}s" for name, seconds in self.phases)
        return f"startup: {parts} | total {self.total:.2f}s"


def first_jvm_call() -> None:
    """PySpark's first call into the JVM, before the background imports start.

    Converting the arguments of its first py4j call, PySpark imports ``pandas`` (its
    numpy converter, registered by ``pyspark.sql``, imports ``pyspark.testing.utils``,
    which checks the pandas version): 0.5-0.7 s of CPU on the main thread, which a bare
    PySpark job pays as well. Made inside ``getOrCreate`` while the background thread
    imports the job's modules, that import shares the GIL with them and took 1.3 s
    instead of 0.5; made first, it runs alone, and the background work overlaps the JVM
    creating the SparkContext, when the main thread only waits.

    Only under ``spark-submit`` (its JVM is up, ``PYSPARK_GATEWAY_PORT``): elsewhere the
    session's own start launches the JVM, with the session's settings. It only moves
    work earlier: if it fails (a PySpark without this private call), it is logged at
    DEBUG and ``getOrCreate`` does the same work, and reports its own errors, as before."""
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        return
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession  # noqa: F401 - registers the converter

    try:
        SparkContext._ensure_initialized()  # connects to spark-submit's JVM
        SparkConf()
    except Exception:  # noqa: BLE001 - getOrCreate meets it again and says so
        log.debug("start-up: PySpark's first JVM call failed; the session makes it", exc_info=True)


def import_in_background(
    *modules: str, then: Callable[[], object] | None = None
) -> threading.Thread:
    """Import ``modules`` in a thread (started), then call ``then``: while the
    SparkSession is created the driver's Python only waits on the JVM, so the job's
    imports (and ``then``: making its first Kinesis client) cost nothing there. An import
    or a ``then`` that fails here fails again, with its error, where it is used."""

    def run() -> None:
        for name in modules:
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 - said where it is imported for use
                return
        if then is not None:
            try:
                then()
            except Exception:  # noqa: BLE001 - said where the job does it for use
                log.debug("start-up: %s failed in the background", then, exc_info=True)

    thread = threading.Thread(target=run, name="kinesis-spout-imports", daemon=True)
    thread.start()
    return thread


def _warm(settings: ReadSettings, modules: tuple[str, ...]) -> Callable[[Iterable[int]], None]:
    def run(_: Iterable[int]) -> None:
        for name in modules:
            importlib.import_module(name)
        from kinesis_spout.kinesis.client import process_client

        process_client(
            settings.endpoint_url, settings.region, profile=settings.profile, role=settings.role
        )

    return run


WARM_GROUP = "kinesis-spout-warm-up"
"""The Spark job group of the warm-up job."""


def warm_executors(
    spark: Any,
    settings: ReadSettings,
    modules: tuple[str, ...],
    before: Callable[[], None] = lambda: None,
) -> Future[None]:
    """Start the executors' Python workers (a task per core, in a thread) while the driver
    builds and opens the stream: each imports the read task's ``modules`` and makes its
    Kinesis client, so the first micro-batch does not wait for that. A failure is only
    logged (the first micro-batch meets it again, and says so). ``before`` runs first, in
    the thread (shipping the user's file); the future returned is done once it ran, with
    its error if it raised (then no warm-up job runs)."""
    sc = spark.sparkContext
    cores = max(int(sc.defaultParallelism), 1)
    ready: Future[None] = Future()

    def run() -> None:
        try:
            before()
        except BaseException as exc:
            ready.set_exception(exc)
            return
        ready.set_result(None)
        try:
            sc.setJobGroup(WARM_GROUP, "kinesis-spout: start the Python workers")
            sc.parallelize(range(cores), cores).foreachPartition(_warm(settings, modules))
        except Exception as exc:  # noqa: BLE001 - the first micro-batch reports it
            log.debug("warm-up job: %s", exc)

    threading.Thread(target=run, name="kinesis-spout-warm-up", daemon=True).start()
    return ready


def quiet_accumulator_errors(spark: Any) -> None:
    """One log line, not a traceback on stderr, when the JVM drops PySpark's accumulator
    connection: a JVM stopping (SIGTERM to it, ``spark.stop()`` during a job) closes the
    socket the driver's accumulator server reads task updates from, and ``socketserver``
    prints that ``EOFError`` as a traceback although nothing is lost by it: the job's
    state is in its checkpoints, not in accumulators. Other errors keep their traceback."""
    server = getattr(spark.sparkContext, "_accumulatorServer", None)
    if server is None:
        return
    print_traceback = server.handle_error

    def handle_error(request: Any, client_address: Any) -> None:
        error = sys.exc_info()[1]
        if isinstance(error, EOFError | ConnectionError):
            log.info(
                "Spark's accumulator connection closed (%s): the JVM is stopping",
                type(error).__name__,
            )
        else:
            print_traceback(request, client_address)

    server.handle_error = handle_error
