"""The dead-letter sink a config names: ``s3://BUCKET/PREFIX``, a directory, or ``none``
(the S3 sink, :mod:`kinesis_spout.deadletter.s3`, is imported only when named)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from kinesis_spout.deadletter.base import (
    REASONS,
    DeadLetterSink,
    FilteredDeadLetterSink,
    LoggingDeadLetterSink,
)
from kinesis_spout.deadletter.jsonl import JsonlDeadLetterSink

if TYPE_CHECKING:
    from kinesis_spout.aws import AssumedRole
    from kinesis_spout.config import SpoutConfig


def open_dead_letter_sink(
    target: str,
    job_name: str,
    on: Iterable[str] = REASONS,
    *,
    region: str | None = None,
    profile: str | None = None,
    role: AssumedRole | None = None,
) -> DeadLetterSink:
    """The sink named by the ``dead_letter`` config value (``s3://``, a directory,
    or ``none``), filtered by ``dead_letter_on``; an S3 sink's client has the
    config's ``region``, ``profile`` and ``role``."""
    sink: DeadLetterSink
    if target.lower() == "none":
        return LoggingDeadLetterSink()
    if target.startswith("s3://"):
        from kinesis_spout.deadletter.s3 import S3DeadLetterSink, s3_client

        sink = S3DeadLetterSink(
            target, job_name, s3_client(region=region, profile=profile, role=role)
        )
    else:
        sink = JsonlDeadLetterSink(target, job_name)
    on = frozenset(on)
    return sink if on >= set(REASONS) else FilteredDeadLetterSink(sink, on)


def open_config_sink(cfg: SpoutConfig) -> DeadLetterSink:
    """The dead-letter sink of a config: its target and job, the reasons of
    ``dead_letter_on``, an S3 client of its region, profile and role."""
    return open_dead_letter_sink(
        cfg.dead_letter,
        cfg.job_name,
        cfg.dead_letter_reasons,
        region=cfg.region,
        profile=cfg.profile,
        role=cfg.assumed_role,
    )
