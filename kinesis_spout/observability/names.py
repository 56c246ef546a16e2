"""How the project's metric names (:mod:`kinesis_spout.metrics`) become Prometheus metrics.

Pure data, no Prometheus import: :class:`~kinesis_spout.observability.prometheus.PrometheusMetrics`
follows it, ``docs/metrics.md`` documents it, and a unit test checks that every name
the code emits has an entry here and a line in the docs.

Every exported metric has the labels ``stream`` and ``job``; a per-shard one also has
``shard`` (empty when the figure is not of one shard). Counters start at 0 for every
label set known (at the start; per shard, when the shard is first reported), so
``rate()`` and ``absent()`` work before the first event. Names follow Prometheus'
conventions: counters end in ``_total``, durations are seconds, and the values of
a label of one counter are disjoint, so a sum over the label means something
(``kinesis_spout_records_total`` summed over ``outcome``: the records done).

:data:`MODES` names what each kind of process can report; its endpoint lists
those metrics and no others.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Kind(enum.Enum):
    """The Prometheus type a project name is exported as."""

    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"
    AGE = "age"
    """A gauge of seconds since something happened, computed when scraped: the
    project reports the age at each checkpoint round, the scrape adds the time since."""


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One project name and the Prometheus series it feeds."""

    name: str
    """The project's name (``increment``/``gauge``/``observe``)."""
    family: str
    """The Prometheus metric name (a counter's ``_total`` included)."""
    kind: Kind
    help: str
    per_shard: bool = True
    """The series has a ``shard`` label."""
    labels: tuple[tuple[str, str], ...] = ()
    """Fixed labels that tell the names sharing a family apart (``outcome="acked"``)."""
    scale: float = 1.0
    """Multiplier to base units (milliseconds to seconds: 0.001)."""
    deprecated: str = ""
    """An earlier Prometheus name of the same series, still fed for one release (and
    documented as deprecated), so dashboards and alerts can move."""

    @property
    def label_names(self) -> tuple[str, ...]:
        shard = ("shard",) if self.per_shard else ()
        return ("stream", "job", *shard, *(k for k, _ in self.labels))


PREFIX = "kinesis_spout_"
RECORDS = PREFIX + "records_total"
ERRORS = PREFIX + "errors_total"
LEASES = PREFIX + "lease_events_total"

_RECORDS_HELP = (
    "Records done, per shard, each counted once under one outcome: acked; dead_lettered "
    "(given up when its retries ran out); expired (given up as older than max_record_age). "
    "Summed over outcome: the records done"
)
_ERRORS_HELP = (
    "Errors that were retried: kinesis (5xx answers, dropped connections), "
    "checkpoint_store (store unreachable), dead_letter (dead-letter write failed), "
    "read (a read refused: access denied, a KMS key disabled; the shard pauses, then "
    "reads again)"
)
_LEASES_HELP = "Shard lease events of this worker: acquired, released (after a flush), lost"


def _records(name: str, outcome: str) -> MetricSpec:
    return MetricSpec(name, RECORDS, Kind.COUNTER, _RECORDS_HELP, labels=(("outcome", outcome),))


def _errors(name: str, kind: str) -> MetricSpec:
    return MetricSpec(name, ERRORS, Kind.COUNTER, _ERRORS_HELP, labels=(("kind", kind),))


def _leases(name: str, event: str) -> MetricSpec:
    return MetricSpec(
        name, LEASES, Kind.COUNTER, _LEASES_HELP, per_shard=False, labels=(("event", event),)
    )


SPECS: tuple[MetricSpec, ...] = (
    MetricSpec(
        "records_read",
        PREFIX + "records_read_total",
        Kind.COUNTER,
        "Records handed out for the first time (first deliveries)",
    ),
    _records("records_acked", "acked"),
    _records("dead_lettered", "dead_lettered"),
    _records("records_expired", "expired"),
    MetricSpec(
        "retries",
        PREFIX + "retries_total",
        Kind.COUNTER,
        "Retry deliveries (fast retries inside a micro-batch included); deliveries are "
        "records_read_total + retries_total",
    ),
    MetricSpec(
        "records_failed",
        PREFIX + "failures_total",
        Kind.COUNTER,
        "Failed deliveries (fails and message timeouts that took effect): each is retried "
        "or given up",
    ),
    MetricSpec(
        "in_flight",
        PREFIX + "in_flight_records",
        Kind.GAUGE,
        "Records handed out and not done, per shard (retries awaiting included)",
    ),
    MetricSpec(
        "millis_behind_latest",
        PREFIX + "behind_latest_seconds",
        Kind.GAUGE,
        "MillisBehindLatest of the shard's last GetRecords answer, in seconds",
        scale=0.001,
    ),
    MetricSpec(
        "checkpoint_age_seconds",
        PREFIX + "checkpoint_age_seconds",
        Kind.AGE,
        "Seconds since the last successful checkpoint write (absent before the first)",
        per_shard=False,
    ),
    MetricSpec(
        "checkpoint_writes",
        PREFIX + "checkpoint_writes_total",
        Kind.COUNTER,
        "Checkpoint writes that took effect",
    ),
    MetricSpec(
        "get_records_seconds",
        PREFIX + "get_records_duration_seconds",
        Kind.HISTOGRAM,
        "Duration of GetRecords calls, answered or not (executor reads: measured in the "
        "read tasks)",
        per_shard=False,
        deprecated=PREFIX + "get_records_seconds",
    ),
    MetricSpec(
        "kinesis_throttled",
        PREFIX + "throttles_total",
        Kind.COUNTER,
        "Throttling answers from Kinesis (retried after a backoff)",
    ),
    _errors("kinesis_errors", "kinesis"),
    _errors("checkpoint_store_errors", "checkpoint_store"),
    _errors("dead_letter_errors", "dead_letter"),
    _errors("read_failures", "read"),
    MetricSpec(
        "iterators_expired",
        PREFIX + "iterators_expired_total",
        Kind.COUNTER,
        "ExpiredIteratorException answers (the iterator is re-opened after the last record)",
    ),
    MetricSpec(
        "empty_aggregates_skipped",
        PREFIX + "empty_aggregates_skipped_total",
        Kind.COUNTER,
        "KPL aggregates that held no user record (skipped)",
    ),
    MetricSpec(
        "corrupt_aggregates",
        PREFIX + "corrupt_aggregates_total",
        Kind.COUNTER,
        "Records with the KPL magic but a bad checksum or body (handed on whole)",
    ),
    MetricSpec(
        "streams_gone",
        PREFIX + "streams_gone_total",
        Kind.COUNTER,
        "Streams of a reader of several that stopped being read: deleted, or recreated "
        "under their name (the series' stream label names it)",
        per_shard=False,
    ),
    MetricSpec(
        "rebalances",
        PREFIX + "rebalances_total",
        Kind.COUNTER,
        "Shard assignments recomputed (workers joined or left)",
        per_shard=False,
    ),
    _leases("leases_acquired", "acquired"),
    _leases("leases_released", "released"),
    _leases("leases_lost", "lost"),
    MetricSpec(
        "batches",
        PREFIX + "batches_total",
        Kind.COUNTER,
        "Micro-batches: of the Spark job (one per progress line), or of a streaming query "
        "(one per progress report of its kinesis source)",
        per_shard=False,
    ),
    MetricSpec(
        "streaming_input_rows",
        PREFIX + "streaming_input_rows_total",
        Kind.COUNTER,
        "Rows the Structured Streaming source read (numInputRows of its progress reports)",
        per_shard=False,
    ),
)

BY_NAME: dict[str, MetricSpec] = {s.name: s for s in SPECS}


def fallback(name: str, kind: Kind) -> MetricSpec:
    """The spec of a name the project does not define (a user's extension): exported
    as ``kinesis_spout_<name>`` (``_total`` for a counter), per shard."""
    clean = "".join(c if c.isalnum() or c == "_" else "_" for c in name).strip("_") or "unnamed"
    family = PREFIX + clean + ("_total" if kind is Kind.COUNTER else "")
    return MetricSpec(name, family, kind, f"{name} (reported by name, not a built-in metric)")


_COORDINATION = frozenset({"rebalances", "leases_acquired", "leases_released", "leases_lost"})
_SPOUT = frozenset(s.name for s in SPECS) - _COORDINATION - {"batches", "streaming_input_rows"}

MODES: dict[str, frozenset[str]] = {
    "spout": _SPOUT,
    "worker": _SPOUT | _COORDINATION,
    "spark": _SPOUT | {"batches"},
    "streaming": frozenset({"batches", "streaming_input_rows"}),
}
"""The project names each kind of process reports, so its endpoint lists those only:
``spout`` a :class:`~kinesis_spout.spout.KinesisSpout` (in your loop, or the multilang
process with one task); ``worker`` the coordination worker and a multilang process
sharing the stream by shard leases (the spout's, and the leases'); ``spark`` the Spark
job's driver (the spout's, and its micro-batches); ``streaming`` a streaming query's
:class:`~kinesis_spout.streaming.progress.KinesisProgressListener`."""
