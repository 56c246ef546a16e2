"""Processing functions of the Spark-job tests.

They run on executors (separate Python processes), so they report what they
saw through files. The conftest registers this module with cloudpickle by
value (the executors cannot import test modules); the spark-submit test
loads it by path (``--process .../spark_job_helpers.py:kill_test_job``),
and the job ships it to the executors with ``addPyFile``.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from kinesis_spout.config import SpoutConfig
from kinesis_spout.spark import (
    FanOutProcessor,
    InputRecord,
    RecordProcessor,
    TransformProcessor,
    dataframe_transform,
    fan_out,
    per_record,
    processor_factory,
)
from kinesis_spout.testing.processes import wait_until

POISON = b"POISON"


def record_deliveries(directory: str) -> Callable[[InputRecord], None]:
    """A per-record function that leaves one file per delivery of a poison
    record (``<message id>.<attempt>.<random>``) and fails it."""

    def process(record: InputRecord) -> None:
        if record.data.startswith(POISON):
            name = f"{record.message_id}.{record.attempt}.{uuid.uuid4().hex}"
            Path(directory, name).touch()
            raise ValueError(f"poison record {record.data[:20]!r}")

    return process


def not_poison(df: Any) -> Any:
    """A transform: a record whose data starts with POISON fails, the others pass."""
    from pyspark.sql import functions as F

    bad = F.col("data").cast("string").startswith(POISON.decode())
    return df.select(
        "_row",
        "shardId",
        "sequenceNumber",
        (~bad).alias("status"),
        F.when(bad, F.lit("poison record")).alias("error"),
    )


def slow_ok(record: InputRecord) -> None:
    """Every record is fine, at ~2 ms each (so a kill lands mid-stream)."""
    time.sleep(0.002)


@processor_factory
def kill_test_job(config: SpoutConfig) -> RecordProcessor:
    return per_record(slow_ok, name="slow_ok")


def words_with_a_bad_one(record: InputRecord) -> list[str]:
    return record.data.decode().split()


def failing_word_sink(bad: str) -> Callable[[Any], Any]:
    """A fan-out sink (a DataFrame transform) that cannot write ``bad``."""

    def sink(words: Any) -> Any:
        from pyspark.sql import functions as F

        return words.select(
            "_root",
            "_id",
            (F.col("word") != F.lit(bad)).alias("status"),
            F.when(F.col("word") == F.lit(bad), F.lit(f"cannot store {bad!r}")).alias("error"),
        )

    return sink


def words_and_places(record: InputRecord) -> list[dict[str, Any]]:
    """Two fields, one named like a record column: each word and its place."""
    return [{"data": w, "n": i} for i, w in enumerate(record.data.decode().split())]


def accept(record: InputRecord) -> None:
    """Every record is fine, at once."""
    return None


KILLER = b"KILLER"


class Delivery(NamedTuple):
    """One delivery :func:`log_deliveries` logged (its file holds where the Python worker
    imported kinesis_spout from)."""

    shard: str
    seq: str
    attempt: int
    partition: int
    executor: int
    """The pid of the Python daemon the worker was forked from: one per executor."""
    t: int


HANG = b"HANG"


def hang_once(
    marker: str, then: Callable[[InputRecord], None], seconds: float = 600.0
) -> Callable[[InputRecord], None]:
    """``then`` for every record; the first delivery of a record starting with
    :data:`HANG` (no ``marker`` file yet) makes it and then sleeps ``seconds``."""

    def process(record: InputRecord) -> None:
        import os

        if record.data.startswith(HANG) and not os.path.exists(marker):
            Path(marker).touch()
            time.sleep(seconds)
        then(record)

    return process


def hang_always(
    then: Callable[[InputRecord], None], seconds: float = 600.0
) -> Callable[[InputRecord], None]:
    """``then`` for every record; every delivery of a record starting with :data:`HANG`
    sleeps ``seconds`` instead (a call that never returns on that input)."""

    def process(record: InputRecord) -> None:
        if record.data.startswith(HANG):
            time.sleep(seconds)
        then(record)

    return process


def fail_then_hang(
    then: Callable[[InputRecord], None], seconds: float = 600.0
) -> Callable[[InputRecord], None]:
    """``then`` for every record; the first delivery of a record starting with
    :data:`RETRY` raises (so such records are retried together), and every later
    delivery of one starting with :data:`RETRY_HANG` sleeps ``seconds``."""

    def process(record: InputRecord) -> None:
        if record.data.startswith(RETRY):
            if record.attempt <= 1:
                raise ValueError("the first delivery fails")
            if record.data.startswith(RETRY_HANG):
                time.sleep(seconds)
        then(record)

    return process


RETRY = b"RETRY"
RETRY_HANG = b"RETRY-HANG"


def hold_task_slots(sc: Any, slots: int, seconds: float, started: Path) -> threading.Thread:
    """Start a Spark job whose ``slots`` tasks each sleep ``seconds`` (in a thread) and
    return once all of them run: the executors' task slots are busy until then. Each task
    says it started with a file in the empty directory ``started`` (local mode: the test's
    ``tmp_path``): Spark's status store writes a stage's task counts at most every
    ``spark.ui.liveUpdatePeriod``, so two tasks that start together may never show as two
    active there."""
    started.mkdir(parents=True, exist_ok=True)

    def hold(i: int) -> None:
        (started / str(i)).touch()
        time.sleep(seconds)

    blocker = threading.Thread(target=lambda: sc.parallelize(range(slots), slots).foreach(hold))
    blocker.start()
    wait_until(
        lambda: len(list(started.iterdir())) == slots,
        timeout=60,
        what=f"the blocking job's {slots} tasks to start",
    )
    return blocker


_PEERS_SEEN = False
"""This Python worker saw deliveries from ``peers`` executors (see log_deliveries)."""


def _wait_for_peers(directory: str, peers: int, timeout: float = 60.0) -> None:
    """Block until deliveries of ``peers`` executor processes are in ``directory`` (at
    most ``timeout`` seconds: then go on, and the test's assertion says what is missing)."""
    global _PEERS_SEEN
    deadline = time.monotonic() + timeout
    while not _PEERS_SEEN and time.monotonic() < deadline:
        executors = {p.name.split(".")[5] for p in Path(directory).iterdir()}
        _PEERS_SEEN = len(executors) >= peers
        if not _PEERS_SEEN:
            time.sleep(0.05)


def log_deliveries(
    directory: str,
    *,
    fail: bytes = POISON,
    kill: bytes = KILLER,
    sleep_ms: float = 0.0,
    peers: int = 0,
) -> Callable[[InputRecord], None]:
    """A per-record function that leaves one file per delivery (see :class:`Delivery`);
    records starting with ``fail`` raise, records starting with ``kill`` end the
    Python worker; every record takes ``sleep_ms`` first. ``peers``: after its first
    delivery, an executor waits until that many executors have delivered (its core
    busy, the micro-batch's other tasks must run on the others)."""

    def process(record: InputRecord) -> None:
        import os

        from pyspark import TaskContext

        if sleep_ms:
            time.sleep(sleep_ms / 1000)
        ctx = TaskContext.get()
        part = ctx.partitionId() if ctx is not None else -1
        name = (
            f"{record.shard_id}.{record.sequence_number}.{record.sub_sequence_number}."
            f"{record.attempt}.{part}.{os.getppid()}.{time.time_ns()}.{uuid.uuid4().hex[:8]}"
        )
        import kinesis_spout  # where this worker has it from: the file's text

        Path(directory, name).write_text(kinesis_spout.__file__ or "")
        if peers:
            _wait_for_peers(directory, peers)
        if record.data.startswith(kill):
            os._exit(3)
        if record.data.startswith(fail):
            raise ValueError(f"poison record {record.data[:20]!r}")

    return process


def log_stream_records(directory: str) -> Callable[[InputRecord], None]:
    """A per-record function leaving one file per delivery, named by the record's
    stream, shard, sequence number and a unique suffix (streams may share shard ids)."""

    def process(record: InputRecord) -> None:
        name = f"{record.stream_name} {record.shard_id} {record.sequence_number} {uuid.uuid4().hex}"
        (Path(directory) / name).touch()

    return process


def read_stream_records(directory: str | Path) -> list[tuple[str, str, str]]:
    """``(stream, shard, sequence)`` of each delivery :func:`log_stream_records` left."""
    return [tuple(p.name.split(" ")[:3]) for p in Path(directory).iterdir()]  # type: ignore[misc]


def read_deliveries(directory: str | Path) -> list[Delivery]:
    """Every delivery logged by :func:`log_deliveries`, by time."""
    out = []
    for p in Path(directory).iterdir():
        shard, seq, _sub, attempt, part, ex, t, _ = p.name.split(".")
        out.append(Delivery(shard, seq, int(attempt), int(part), int(ex), int(t)))
    return sorted(out, key=lambda d: d.t)


@processor_factory
def logged_job(config: SpoutConfig) -> RecordProcessor:
    """:func:`log_deliveries` into ``$KSPOUT_TEST_DELIVERIES``, ``$KSPOUT_TEST_SLOW_MS``
    per record, ``$KSPOUT_TEST_PEERS`` (for jobs started with ``kinesis-spout run``)."""
    return per_record(_logged(config), name="logged")


def poison_until_fixed(fixed: str, record: InputRecord) -> None:
    """Fails poison records until the file ``fixed`` exists (the bug is fixed);
    ~2 ms per record, so a kill lands mid-stream."""
    import os

    time.sleep(0.002)
    if record.data.startswith(POISON) and not os.path.exists(fixed):
        raise ValueError(f"poison record {record.data[:20]!r}")


@processor_factory
def poison_job(config: SpoutConfig) -> RecordProcessor:
    """:func:`poison_until_fixed` with the file named by ``$KSPOUT_TEST_FIXED``."""
    import functools
    import os

    fn = functools.partial(poison_until_fixed, os.environ["KSPOUT_TEST_FIXED"])
    return per_record(fn, name="poison_until_fixed")


def flaky_and_poison(record: InputRecord) -> None:
    """POISON records fail every time; ``FLAKY`` ones fail their first delivery only."""
    if record.data.startswith(POISON):
        raise ValueError(f"poison record {record.data[:20]!r}")
    if record.data.startswith(b"FLAKY") and record.attempt == 1:
        raise ValueError("flaky: first try fails")


def _logged(config: SpoutConfig) -> Callable[[InputRecord], None]:
    import os

    directory = os.environ["KSPOUT_TEST_DELIVERIES"]
    slow = float(os.environ.get("KSPOUT_TEST_SLOW_MS", "0"))
    peers = int(os.environ.get("KSPOUT_TEST_PEERS", "0"))
    return log_deliveries(directory, sleep_ms=slow, peers=peers)


def per_record_transform(
    fn: Callable[[InputRecord], None], name: str = "per_record", *, keys: bool = False
) -> TransformProcessor:
    """A DataFrame transform that runs ``fn`` on each record (a ``mapInArrow``; a record
    is ok unless ``fn`` raises): the transform style's user code on the executors, as a
    test makes it fail or hang. ``keys``: joined back to ``shardId`` and
    ``sequenceNumber`` (for a sink)."""

    def statuses(batches: Any) -> Any:
        import pyarrow as pa

        from kinesis_spout.spark.process.arrow import ROW, format_error
        from kinesis_spout.spark.process.styles import batch_records

        for batch in batches:
            ok, errors = [], []
            for record in batch_records(batch):
                try:
                    fn(record)
                except Exception as exc:
                    ok.append(False)
                    errors.append(format_error(exc))
                else:
                    ok.append(True)
                    errors.append(None)
            yield pa.RecordBatch.from_arrays(
                [batch.column(ROW), pa.array(ok, pa.bool_()), pa.array(errors, pa.string())],
                names=["_row", "status", "error"],
            )

    def transform(df: Any) -> Any:
        back = df.mapInArrow(statuses, "_row long, status boolean, error string")
        if not keys:
            return back
        return back.join(df.select("_row", "shardId", "sequenceNumber"), "_row")

    return dataframe_transform(transform, name=name)


@processor_factory
def logged_transform_job(config: SpoutConfig) -> TransformProcessor:
    """:func:`logged_job` as a DataFrame transform (:func:`per_record_transform`)."""
    return per_record_transform(_logged(config), "logged_transform", keys=True)


@processor_factory
def logged_fan_out_job(config: SpoutConfig) -> FanOutProcessor:
    """:func:`logged_job` as the emit of a fan-out: one derived record per source
    (``"<shard>:<seq>"``), written by the configured sink (an anchored sink)."""
    fn = _logged(config)

    def emit(record: InputRecord) -> list[str]:
        fn(record)
        return [f"{record.shard_id}:{record.sequence_number}"]

    return fan_out(emit, "id string", [written_by_the_row_sink], name="logged_fan_out")


def written_by_the_row_sink(derived: Any) -> None:
    """A fan-out sink with nothing to do (the configured sink writes the derived records)."""
    return None


# --- what the tests check (driver side) ---------------------------------------------


def last_per_shard(put: list[tuple[str, str]]) -> dict[str, str]:
    """The last sequence number put into each shard (what its checkpoint ends at)."""
    last: dict[str, int] = {}
    for shard, seq in put:
        last[shard] = max(last.get(shard, 0), int(seq))
    return {s: str(v) for s, v in last.items()}


def spy_results(driver: Any) -> list[Any]:
    """Every ``ReadResult`` an ``MicroBatchLoop`` applies, collected as it applies them."""
    seen: list[Any] = []
    apply = driver.planner.apply

    def spy(results: Any) -> tuple[int, int]:
        results = list(results)
        seen.extend(results)
        return apply(results)  # type: ignore[no-any-return]

    driver.planner.apply = spy
    return seen


def slow_with_poison(record: InputRecord) -> None:
    """~2 ms per record (so a kill lands mid-stream); POISON records fail every time."""
    time.sleep(0.002)
    if record.data.startswith(POISON):
        raise ValueError(f"poison record {record.data[:20]!r}")


@processor_factory
def poison_kill_test_job(config: SpoutConfig) -> RecordProcessor:
    return per_record(slow_with_poison, name="slow_with_poison")


def sink_rows(directory: Path) -> int:
    """Rows in a parquet sink so far (0 while it has none, or a file is being renamed)."""
    from kinesis_spout.spark.process.sinks import read_parquet_dir

    try:
        table = read_parquet_dir(directory)
    except OSError:  # a file renamed into place while listing
        return 0
    return 0 if table is None else table.num_rows


def submit_and_kill(
    process: str,
    args: list[str],
    until: Callable[[], bool],
    log_path: Path,
    env: dict[str, str] | None = None,
) -> None:
    """``spark-submit`` the job (``local[2]``, ``--process process`` and ``args``, in
    ``env``, default this process's) and SIGKILL its whole process group once ``until()``
    is true (waited for with a deadline; the job's output goes to ``log_path``), then wait
    until no process of it is left (:meth:`devkit.chaos.process.JobProcess.kill`: a
    killed driver still holds its job lease until it has exited).
    spark-submit itself, not ``kinesis-spout run`` (whose job outlives it by a moment):
    SIGKILL of its process group is the driver's death."""
    from devkit.chaos.process import JobProcess
    from kinesis_spout.spark.submit import (
        DEFAULT_CONF,
        find_spark_submit,
        job_environment,
        job_file,
    )

    conf = [a for k, v in DEFAULT_CONF.items() for a in ("--conf", f"{k}={v}")]
    cmd = [
        find_spark_submit(),
        "--master",
        "local[2]",
        *conf,
        "--conf",
        "spark.ui.enabled=false",
        str(job_file()),
        "--process",
        process,
        *args,
    ]
    job = JobProcess(cmd, job_environment(env, master="local[2]"), log_path).start()
    try:
        deadline = time.monotonic() + 180
        while not until():
            assert job.poll() is None, f"job exited early:\n{log_path.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"no progress:\n{log_path.read_text()[-3000:]}"
            time.sleep(0.2)
    finally:
        job.kill()


def frame_jobs(
    spark: Any, cfg: Any, stream: str, processor: Any, wrap: Any = None
) -> tuple[Any, Any]:
    """The :class:`FrameJobs` of ``processor`` (a transform or a fan-out) on ``stream`` as
    the job builds them (read ends in ``cfg``'s checkpoint store; ``wrap``, if given,
    wraps the driver's store), and the read settings."""
    from kinesis_spout.spark.plan import ReadSettings
    from kinesis_spout.spark.read.frames import FrameJobs
    from kinesis_spout.spark.read.recorded import RecordTo

    def ends(run: str, key: int) -> RecordTo:
        return RecordTo(cfg.checkpoint_store, cfg.job_name, stream, run, key)

    store = ends("", 0).open()
    stores = [wrap(store) if wrap is not None else store]
    frames = FrameJobs(spark, processor, "none", ends, stores)
    return frames, ReadSettings.of(cfg)


def split_unless_flagged(flag: str, calls: str) -> Callable[[InputRecord], list[str]]:
    """A fan-out's ``emit``: the record's words, but a record with the word ``odd`` fails
    once the file ``flag`` exists (an ``emit`` whose answer changes between two
    computations of the same records). Each call appends a line to the file ``calls``."""

    def split(record: InputRecord) -> list[str]:
        with open(calls, "a") as f:
            f.write(f"{record.message_id}\n")
        words = record.data.decode().split()
        if "odd" in words and Path(flag).exists():
            raise ValueError("flagged: odd")
        return words

    return split


def note_frozen_heap(directory: str) -> Callable[[InputRecord], None]:
    """A per-record function that leaves a file per call, ``<shard>-<sequence>.<n>``: ``n``
    is how many objects its process has frozen out of the garbage collector's scans."""

    def process(record: InputRecord) -> None:
        import gc

        Path(
            directory, f"{record.shard_id}-{record.sequence_number}.{gc.get_freeze_count()}"
        ).touch()

    return process


def words_noting_frozen_heap(directory: str) -> Callable[[InputRecord], list[str]]:
    """A fan-out ``emit`` (a record's words) that leaves the same file as
    :func:`note_frozen_heap` for each record."""

    note = note_frozen_heap(directory)

    def emit(record: InputRecord) -> list[str]:
        note(record)
        return record.data.decode().split()

    return emit
