"""The anchored sinks of a fan-out: who they are in a micro-batch, and what they said.

A fan-out's tree is complete when every sink has written every derived record.
The sinks of a micro-batch are the fan-out's own, then the job's row sink (``sink``)
as one more branch when there is one (:func:`anchored_sinks`). Each sink gets the
derived records (``_root``, ``_id`` and the derived fields) and returns None (it
wrote them all) or a DataFrame of statuses (:func:`sink_frame`), settled where they
are (:mod:`~kinesis_spout.spark.process.settle`).
"""

from __future__ import annotations

from typing import Any

from kinesis_spout.spark.process.arrow import ROOT
from kinesis_spout.spark.process.contract import ProcessingContractError, ok_and_error
from kinesis_spout.spark.process.exprs import Exprs
from kinesis_spout.spark.process.fanout import ID
from kinesis_spout.spark.process.sinks import rows_writer
from kinesis_spout.spark.process.styles import FanOutProcessor, FanOutSink


def anchored_sinks(
    p: FanOutProcessor, batch_id: int, target: str | None
) -> list[tuple[str, FanOutSink]]:
    """The sinks of micro-batch ``batch_id``, by name: the fan-out's, then the row sink,
    written by the executors to ``target`` (None: no row sink)."""
    sinks: list[tuple[str, FanOutSink]] = [(_sink_name(s), s) for s in p.sinks]
    if target is not None:
        sinks.append((f"row sink {target}", _ExecutorRowSinkBranch(target, batch_id)))
    return sinks


def _sink_name(sink: object) -> str:
    return str(
        getattr(sink, "name", None) or getattr(sink, "__qualname__", None) or type(sink).__name__
    )


class _ExecutorRowSinkBranch:
    """The configured sink as one more anchored sink of a fan-out tree, written by the
    executors: every derived record is written, or the job fails."""

    def __init__(self, target: str, batch_id: int) -> None:
        self.target = target
        self.batch_id = batch_id

    def __call__(self, derived: Any) -> None:
        columns = [c for c in derived.columns if c not in (ROOT, ID)]
        writer = rows_writer(self.target, self.batch_id)
        derived.select(*columns).mapInArrow(writer, "written long").collect()


def sink_frame(name: str, sink: FanOutSink, derived: Any, exprs: Exprs) -> Any:
    """Run one anchored sink on the derived records: None if it wrote everything (it
    returned None), else the DataFrame of its statuses (``_root``, ``_id``, ``ok``,
    ``error``): it must keep the root and id columns."""
    res = sink(derived)
    if res is None:
        return None
    if not hasattr(res, "columns"):
        raise ProcessingContractError(
            f"sink {name} returned {type(res).__name__}: expected a DataFrame of statuses or None"
        )
    for key in (ROOT, ID):
        if key not in res.columns:
            raise ProcessingContractError(
                f"sink {name} returned columns {res.columns}: it must keep {key!r}"
            )
    ok, error = ok_and_error(res, f"sink {name}", ID, exprs)
    return res.select(ROOT, ID, ok, error)
