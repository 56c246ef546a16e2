"""The timeline of a chaos run, as data: sink rows and dead letters over time, every stored
checkpoint of every shard, and the events (runs started, kills, failures, ZooKeeper down).

Pure: :class:`TimelineRecorder` is told the time (seconds since the run's origin, the time
base of ``kill_log``); it reads no clock. ``bench/chaos.py --plot`` draws it
(:mod:`.timeline_figure` turns it into what is drawn, :mod:`.chart` draws that).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from devkit.chaos.watch import CheckpointSeen


class EventKind(Enum):
    """What happened to the job or to ZooKeeper at a moment of the run."""

    START = "start"
    """The first run of the job was launched."""
    RESTART = "restart"
    """A later run was launched (after a kill, a failure, or to finish draining)."""
    FIRST_ROWS = "first_rows"
    """The current run's first sink file appeared (it had started up and written)."""
    KILL = "kill"
    """SIGKILL to the job's whole process group."""
    FAILURE = "failure"
    """The job exited with an error on its own."""
    ZK_STOP = "zk_stop"
    ZK_START = "zk_start"
    DRAINED = "drained"
    """The last run stopped on its own, idle: the end of the chaos."""


@dataclass(frozen=True, slots=True)
class Sample:
    """What was durable at one moment (the runner samples every poll)."""

    at: float
    """Seconds since the run's origin."""
    rows: int
    """Rows in the Parquet sink (replayed records count again)."""
    dead_letters: int
    """Dead-letter entries written (complete lines)."""


@dataclass(frozen=True, slots=True)
class Event:
    at: float
    kind: EventKind
    note: str = ""


@dataclass(frozen=True, slots=True)
class CheckpointPoint:
    """One stored checkpoint value of a shard, as records of the shard at or below it."""

    at: float
    """When the watcher first saw the value (seconds since the run's origin)."""
    shard_id: str
    done: int
    """Records of the shard at or below the checkpoint (all of them at shard end)."""
    total: int
    """Records put into the shard."""

    @property
    def percent(self) -> float:
        return 100.0 * self.done / self.total if self.total else 100.0


@dataclass(frozen=True, slots=True)
class Timeline:
    """Everything ``--plot`` draws of a chaos run."""

    samples: tuple[Sample, ...]
    events: tuple[Event, ...]
    checkpoints: tuple[CheckpointPoint, ...]
    shard_records: tuple[tuple[str, int], ...]
    """Records put per shard, in shard order."""
    poison: int = 0
    """Poison records put (each should end as one dead letter)."""

    def of_kind(self, kind: EventKind) -> tuple[Event, ...]:
        return tuple(e for e in self.events if e.kind is kind)

    @property
    def shards(self) -> tuple[str, ...]:
        return tuple(s for s, _ in self.shard_records)


def checkpoint_points(
    seen: Iterable[CheckpointSeen], offset: float, sequences: Mapping[str, Sequence[int]]
) -> tuple[CheckpointPoint, ...]:
    """Each stored value as a :class:`CheckpointPoint`, in order of time.

    ``offset``: the watcher's start in seconds since the run's origin (``seen_at`` counts
    from the watcher's start). ``sequences``: the sequence numbers put per shard, sorted.
    A value of a shard not in ``sequences`` is an error (the watcher saw another stream).
    """
    out = []
    for s in seen:
        if s.shard_id not in sequences:
            raise ValueError(f"checkpoint of shard {s.shard_id!r}, which had no records put")
        seqs = sequences[s.shard_id]
        if s.shard_end:
            done = len(seqs)
        elif s.sequence is None:
            done = 0
        else:
            done = bisect_right(seqs, s.sequence)
        out.append(CheckpointPoint(round(s.seen_at + offset, 3), s.shard_id, done, len(seqs)))
    return tuple(sorted(out, key=lambda p: (p.at, p.shard_id, p.done)))


class TimelineRecorder:
    """Collects a run's samples and events as they happen (times passed in, in order)."""

    def __init__(self) -> None:
        self._samples: list[Sample] = []
        self._events: list[Event] = []

    def sample(self, at: float, rows: int, dead_letters: int) -> None:
        self._samples.append(Sample(round(at, 3), rows, dead_letters))

    def event(self, at: float, kind: EventKind, note: str = "") -> None:
        self._events.append(Event(round(at, 3), kind, note))

    @property
    def last_at(self) -> float:
        """The time of the last sample (0 before the first)."""
        return self._samples[-1].at if self._samples else 0.0

    @property
    def events(self) -> tuple[Event, ...]:
        return tuple(self._events)

    def timeline(
        self,
        *,
        checkpoints: Iterable[CheckpointSeen] = (),
        watch_offset: float = 0.0,
        sequences: Mapping[str, Sequence[int]],
        poison: int = 0,
    ) -> Timeline:
        """The recorded timeline, with the stored checkpoints the watcher saw.
        ``sequences``: the sequence numbers put per shard (sorted here)."""
        ordered = {shard: sorted(seqs) for shard, seqs in sorted(sequences.items())}
        return Timeline(
            tuple(self._samples),
            tuple(sorted(self._events, key=lambda e: e.at)),
            checkpoint_points(checkpoints, watch_offset, ordered),
            tuple((shard, len(seqs)) for shard, seqs in ordered.items()),
            poison,
        )
