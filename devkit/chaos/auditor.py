"""The chaos auditor: reads the sink and the dead letters and works out what was lost,
duplicated and replayed (see the package docstring for the checks)."""

from __future__ import annotations

import base64
import json
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from devkit.chaos_process import FLAGS, parse_payload

FLAG_WORDS = [f.decode() for f in FLAGS]


@dataclass(frozen=True, slots=True)
class SinkRow:
    """One row of the job's Parquet sink."""

    shard_id: str
    sequence: int
    rid: str
    file: str
    sub: int = 0
    """The sub-sequence number (the user record's index in a KPL aggregate)."""


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One dead-letter entry."""

    shard_id: str
    sequence: int
    rid: str
    error: str | None
    attempts: int
    file: str
    """Path relative to the dead-letter directory."""
    line: int
    """0-based line in that file."""
    sub: int = 0


def read_sink(directory: str | Path, names: Collection[str] | None = None) -> list[SinkRow]:
    """Every row of every ``part-*.parquet`` file (ids parsed from ``data``), or of the
    files ``names``; of a fan-out run's derived rows (a ``word`` column), the one per
    delivery whose word is the flag."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    out: list[SinkRow] = []
    base = Path(directory)
    if not base.is_dir():
        return out
    for p in sorted(base.glob("part-*.parquet")):
        if names is not None and p.name not in names:
            continue
        columns = ("shardId", "sequenceNumber", "subSequenceNumber", "data")
        table = pq.read_table(p)
        if "word" in table.column_names:
            words = pc.is_in(table.column("word"), value_set=pa.array(FLAG_WORDS))
            table = table.filter(words)
        cols = [table.column(c).to_pylist() for c in columns]
        for shard, seq, sub, data in zip(*cols, strict=True):
            out.append(SinkRow(shard, int(seq), parse_payload(data)[0], p.name, int(sub)))
    return out


def read_dead_letter_dir(directory: str | Path) -> tuple[list[DeadLetter], list[str]]:
    """Every dead-letter entry, and the lines that are not one (e.g. cut by a crash)."""
    base = Path(directory)
    entries: list[DeadLetter] = []
    bad: list[str] = []
    if not base.is_dir():
        return entries, bad
    for p in sorted(base.rglob("*.jsonl")):
        rel = str(p.relative_to(base))
        for i, line in enumerate(p.read_text(encoding="utf-8").splitlines()):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                rid = parse_payload(base64.b64decode(obj["data_base64"]))[0]
                entries.append(
                    DeadLetter(
                        obj["shard_id"],
                        int(obj["sequence_number"]),
                        rid,
                        obj.get("error"),
                        int(obj.get("attempts") or 0),
                        rel,
                        i,
                        int(obj.get("sub_sequence_number") or 0),
                    )
                )
            except (ValueError, KeyError, TypeError):
                bad.append(f"{rel}:{i + 1}: {line[:80]}")
    return entries, bad


@dataclass(frozen=True, slots=True)
class Tally:
    """The auditor's counts (see :func:`tally`)."""

    expected: int
    processed_rows: int
    processed_distinct: int
    lost: int
    lost_sample: tuple[str, ...]
    duplicates: int
    unknown_ids: int
    poison: int
    dead_lettered: int
    """Distinct poison ids found in the dead-letter directory."""
    dead_letter_entries: int
    dead_letter_duplicates: int
    """Dead-letter entries beyond the first of each id."""
    poison_in_output: int
    unexpected_dead_letters: int
    """Distinct good (non-poison) ids found in the dead-letter directory."""
    bad_dead_letter_entries: int
    """Poison entries whose error does not name the id or whose attempts are not
    ``retry_limit + 1``."""


def tally(
    expected: Sequence[str],
    poison: Iterable[str],
    processed: Iterable[str],
    dead: Iterable[tuple[str, str | None, int]],
    retry_limit: int,
    killers: Iterable[str] = (),
) -> Tally:
    """Count what a run did with ``expected`` ids.

    ``poison``: every id that never processes ok (killers included); ``killers``: those
    that end their Python worker (their error is Spark's, which cannot name the id);
    ``processed``: the id of every sink row (repeats are duplicates);
    ``dead``: ``(id, error, attempts)`` per dead-letter entry.
    """
    want = set(expected)
    poison_set = set(poison)
    rows = Counter(processed)
    dead_list = list(dead)
    dead_ids = Counter(rid for rid, _, _ in dead_list)
    accounted = set(rows) | set(dead_ids)
    lost = sorted(want - accounted)
    kill_set = set(killers)
    bad_entries = sum(
        1
        for rid, error, attempts in dead_list
        if rid in poison_set
        and (not error or (rid not in error and rid not in kill_set) or attempts != retry_limit + 1)
    )
    return Tally(
        expected=len(want),
        processed_rows=sum(rows.values()),
        processed_distinct=len(rows),
        lost=len(lost),
        lost_sample=tuple(lost[:10]),
        duplicates=sum(rows.values()) - len(rows),
        unknown_ids=len(accounted - want),
        poison=len(poison_set),
        dead_lettered=len(set(dead_ids) & poison_set),
        dead_letter_entries=len(dead_list),
        dead_letter_duplicates=len(dead_list) - len(dead_ids),
        poison_in_output=len(set(rows) & poison_set),
        unexpected_dead_letters=len(set(dead_ids) - poison_set),
        bad_dead_letter_entries=bad_entries,
    )


@dataclass(frozen=True, slots=True)
class KillSnapshot:
    """What was durable when a kill's process group was dead."""

    index: int
    at: float
    """Seconds since the chaos run started."""
    rows: int
    """Sink rows at that moment."""
    sink_files: frozenset[str]
    dead_letter_lines: Mapping[str, int]
    """Complete lines per dead-letter file (relative path)."""
    checkpoints: Mapping[str, int | tuple[int, int]]
    """Stored checkpoint per shard, ``(sequence, sub-sequence)`` (a bare sequence: the
    whole record is done); shards with none are absent."""


@dataclass(frozen=True, slots=True)
class ReplayReport:
    """Replay windows of the kills and the duplicates they do not explain."""

    windows: tuple[int, ...]
    """Per kill: sink records (distinct) after the stored checkpoint of their shard."""
    shard_max: tuple[int, ...]
    """Per kill: the largest window of one shard."""
    unexplained_duplicates: int
    """Sink repeats of a record beyond the number of windows it was in."""
    dead_letter_windows: tuple[int, ...]
    unexplained_dead_letter_duplicates: int

    @property
    def total(self) -> int:
        return sum(self.windows)

    @property
    def max_per_shard(self) -> int:
        """The largest window of one shard at one kill."""
        return max(self.shard_max, default=0)


_NOTHING = (-1, -1)
_WHOLE = 2**31
"""A sub-sequence above any: a bare sequence checkpoint covers every user record of it."""


def _done_up_to(checkpoint: int | tuple[int, int]) -> tuple[int, int]:
    return (checkpoint, _WHOLE) if isinstance(checkpoint, int) else checkpoint


def replay_windows(
    snapshots: Sequence[KillSnapshot],
    rows: Sequence[SinkRow],
    dead: Sequence[DeadLetter],
) -> ReplayReport:
    """Which duplicates the kills explain.

    A restart resumes each shard after its stored checkpoint, so the records
    after it that were already in the sink (or dead-lettered) at a kill are
    written again: that is the kill's window. A record may be in the sink (or
    the dead-letter directory) at most once plus the number of windows it was in.
    """
    by_file: dict[str, list[SinkRow]] = defaultdict(list)
    for r in rows:
        by_file[r.file].append(r)
    in_windows: Counter[tuple[str, int, int]] = Counter()
    dl_in_windows: Counter[tuple[str, int, int]] = Counter()
    windows: list[int] = []
    shard_max: list[int] = []
    dl_windows: list[int] = []
    for snap in snapshots:
        done = {s: _done_up_to(v) for s, v in snap.checkpoints.items()}
        keys: set[tuple[str, int, int]] = set()
        for name in snap.sink_files:
            for r in by_file.get(name, ()):
                if (r.sequence, r.sub) > done.get(r.shard_id, _NOTHING):
                    keys.add((r.shard_id, r.sequence, r.sub))
        per_shard = Counter(shard for shard, _, _ in keys)
        shard_max.append(max(per_shard.values(), default=0))
        windows.append(len(keys))
        in_windows.update(keys)
        dl_keys = {
            (d.shard_id, d.sequence, d.sub)
            for d in dead
            if d.line < snap.dead_letter_lines.get(d.file, 0)
            and (d.sequence, d.sub) > done.get(d.shard_id, _NOTHING)
        }
        dl_windows.append(len(dl_keys))
        dl_in_windows.update(dl_keys)
    seen = Counter((r.shard_id, r.sequence, r.sub) for r in rows)
    unexplained = sum(max(0, n - 1 - in_windows[k]) for k, n in seen.items())
    dl_seen = Counter((d.shard_id, d.sequence, d.sub) for d in dead)
    dl_unexplained = sum(max(0, n - 1 - dl_in_windows[k]) for k, n in dl_seen.items())
    return ReplayReport(
        tuple(windows), tuple(shard_max), unexplained, tuple(dl_windows), dl_unexplained
    )
