"""The streaming source's progress, as Spark reports it: :class:`KinesisProgressListener`.

PySpark's Python Data Source API gives a streaming source no way to report custom
metrics (``SourceProgress.metrics`` stays empty), but every ``StreamingQueryProgress``
carries ``numInputRows``, the rates and the batch's start and end offsets, which for this
source are its batch plans (:mod:`~kinesis_spout.streaming.batch_offset`); its
``description`` is only a JVM class name, so the source is recognised by its offsets.
:class:`KinesisProgressListener` turns those into :class:`KinesisSourceProgress` values
(one per query, several streams together, shards named ``<stream>/<shardId>``), keeps
the last ones, and can feed a :class:`~kinesis_spout.metrics.MetricsCollector`. In use:
docs/streaming-source.md.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql.streaming.listener import StreamingQueryListener

from kinesis_spout.metrics import MetricsCollector
from kinesis_spout.streaming.batch_offset import StreamsOffset
from kinesis_spout.streaming.errors import OffsetError


@dataclass(frozen=True, slots=True)
class KinesisSourceProgress:
    """One micro-batch of a ``kinesis`` source, from Spark's progress report."""

    query_id: str
    batch_id: int
    """Spark's batch id (the one ``foreachBatch`` gets)."""
    stream: str
    """The stream; several: their names, comma-separated."""
    job: str
    plan: int
    """The source's own batch number (its offset's ``batch``)."""
    quotas: Mapping[str, int]
    """Per shard planned in this batch, the most records it may read (several streams:
    keyed ``<stream>/<shardId>``)."""
    after: Mapping[str, str | None]
    """Per shard, the sequence number the batch read after (None: from its start)."""
    num_input_rows: int
    input_rows_per_second: float
    processed_rows_per_second: float
    description: str
    custom_metrics: Mapping[str, str]
    """``SourceProgress.metrics`` (empty: PySpark's Python sources cannot set any)."""


def _get(obj: Any, name: str) -> Any:
    """A field of a progress object or of its dict form (``query.lastProgress``)."""
    return obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)


def _offset(text: Any) -> StreamsOffset | None:
    if not text:
        return None
    try:
        return StreamsOffset.from_json(json.loads(text) if isinstance(text, str) else text)
    except (OffsetError, ValueError, TypeError):
        return None  # another source's offset


def _shards(end: StreamsOffset) -> tuple[dict[str, int], dict[str, str | None]]:
    """Per shard with a quota, the quota and the sequence number it reads after (keyed
    ``<stream>/<shardId>`` with several streams)."""
    quotas: dict[str, int] = {}
    after: dict[str, str | None] = {}
    for name, part in end.parts.items():
        for shard, plan in part.reads.items():
            key = shard if len(end.parts) == 1 else f"{name}/{shard}"
            quotas[key] = plan.quota
            after[key] = plan.position.sequence if plan.position is not None else None
    return quotas, after


def kinesis_progress(progress: Any) -> list[KinesisSourceProgress]:
    """The ``kinesis`` sources of one ``StreamingQueryProgress`` (or its dict form)."""
    out = []
    for source in _get(progress, "sources") or ():
        end = _offset(_get(source, "endOffset"))
        if end is None:
            continue
        quotas, after = _shards(end)
        out.append(
            KinesisSourceProgress(
                query_id=str(_get(progress, "id")),
                batch_id=int(_get(progress, "batchId")),
                stream=",".join(end.streams),
                job=end.job_name,
                plan=end.batch,
                quotas=quotas,
                after=after,
                num_input_rows=int(_get(source, "numInputRows") or 0),
                input_rows_per_second=float(_get(source, "inputRowsPerSecond") or 0.0),
                processed_rows_per_second=float(_get(source, "processedRowsPerSecond") or 0.0),
                description=str(_get(source, "description")),
                custom_metrics=dict(_get(source, "metrics") or {}),
            )
        )
    return out


class KinesisProgressListener(StreamingQueryListener):
    """Collects the ``kinesis`` sources' progress of every query of a session.

    ``spark.streams.addListener(listener)``; :attr:`progress` holds the last
    ``keep`` reports. With ``metrics``, each report adds its rows to
    ``streaming_input_rows`` and one to ``batches``.
    """

    def __init__(self, metrics: MetricsCollector | None = None, keep: int = 1000) -> None:
        super().__init__()
        self.metrics = metrics
        self._lock = threading.Lock()
        self._progress: deque[KinesisSourceProgress] = deque(maxlen=keep)

    @property
    def progress(self) -> list[KinesisSourceProgress]:
        with self._lock:
            return list(self._progress)

    def onQueryStarted(self, event: Any) -> None:
        return None

    def onQueryProgress(self, event: Any) -> None:
        for p in kinesis_progress(event.progress):
            with self._lock:
                self._progress.append(p)
            if self.metrics is not None:
                self.metrics.increment("streaming_input_rows", p.num_input_rows)
                self.metrics.increment("batches")

    def onQueryIdle(self, event: Any) -> None:
        return None

    def onQueryTerminated(self, event: Any) -> None:
        return None
