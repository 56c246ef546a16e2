"""Chaos runs: the Spark job under SIGKILLs, a ZooKeeper restart, Kinesis faults and
poison records, then an audit of what came out.

Used by ``bench/chaos.py`` (the full run whose figures are in
``docs/guarantees.md``) and by ``tests/integration/chaos`` (a short run on every
change). The pieces, each usable alone:

* :class:`ChaosPlan`: what to do (records, kills, seed, fault rates, job settings);
* :func:`make_records`, :func:`make_schedule`: the ids, the poison set and the
  moments of the kills and of the ZooKeeper restart, all from the seed;
* :class:`SinkProgress`: rows in the job's Parquet sink so far (file footers only);
* :class:`CheckpointWatcher`: a kazoo client that records every checkpoint value
  it sees in ZooKeeper (polling and data watches), and :func:`check_monotonic`;
* :class:`JobProcess`: ``spark-submit`` in a session of its own, killed as a
  group with SIGKILL, with a check that nothing of it survived;
* :func:`tally` and :func:`replay_windows`: the auditor's arithmetic;
* :func:`run_chaos`: all of it against real local servers;
* :class:`Timeline`: the run over time (sink rows and dead letters per poll, every stored
  checkpoint, the kills, restarts and ZooKeeper's outage), recorded by the run loop into
  :attr:`ChaosResult.timeline`; :func:`timeline_figure` turns it into what
  :func:`draw_timeline` draws (``bench/chaos.py --plot FILE``, needs matplotlib).

Modules: ``plan`` (plan, records, schedule, job config), ``watch`` (sink progress,
checkpoint watcher), ``process`` (the job process), ``zkrestart`` (ZooKeeper stopped and
started), ``auditor`` (sink and dead-letter reading, tally, replay windows), ``report``
(figures, problems), ``loop`` (the job under kills and restarts until it drains),
``runner`` (:func:`run_chaos`: servers, records, the loop, the audit), ``timeline`` and
``timeline_figure`` (the run over time, pure) and ``chart`` (drawing it).

What the auditor checks (:attr:`ChaosResult.problems` lists the guarantees that
did not hold, :attr:`ChaosResult.missed` the issue's stricter criteria that were
not met):

* **lost** = ids put - ids in the sink - ids dead-lettered: must be 0;
* **duplicates** = sink rows - distinct ids in the sink. Each kill replays, per
  shard, the records after the checkpoint stored at that moment; the rows of
  those records already in the sink form the kill's *replay window*. Every
  duplicate must lie in a replay window (``unexplained_duplicates`` = 0), no
  window of one shard may exceed ``max_in_flight``, and the total must be at
  most ``kills x max_in_flight x shards``;
* **poison**: every poison id dead-lettered, with its error and
  ``retry_limit + 1`` attempts, and never in the sink; dead-letter entries
  repeated by a replay are counted (``dead_letter_duplicates``, a *missed*
  criterion when not 0) and must lie in a replay window too;
* **checkpoints_monotonic**: ordered by the ZooKeeper transaction id of each
  write, no shard's checkpoint ever went backwards; at the end every shard's
  checkpoint is its last sequence number.
"""

from __future__ import annotations

from devkit.chaos.auditor import (
    DeadLetter,
    KillSnapshot,
    ReplayReport,
    SinkRow,
    Tally,
    read_dead_letter_dir,
    read_sink,
    replay_windows,
    tally,
)
from devkit.chaos.chart import draw_chaos_result, draw_timeline
from devkit.chaos.plan import (
    JOB_KEYS,
    JOB_NAME,
    POLL_SECONDS,
    PROCESS_SPECS,
    ZK_ROOT,
    ChaosError,
    ChaosPlan,
    ChaosRecords,
    Schedule,
    job_config,
    make_records,
    make_schedule,
)
from devkit.chaos.process import JobProcess, job_command, session_members
from devkit.chaos.report import ChaosResult, RunFacts, build_result, figures_json
from devkit.chaos.runner import run_chaos
from devkit.chaos.timeline import (
    CheckpointPoint,
    Event,
    EventKind,
    Sample,
    Timeline,
    TimelineRecorder,
    checkpoint_points,
)
from devkit.chaos.timeline_figure import (
    Line,
    Marker,
    Span,
    TimelineFigure,
    chaos_titles,
    throughput,
    timeline_figure,
)
from devkit.chaos.watch import (
    CheckpointSeen,
    CheckpointWatcher,
    MonotonicReport,
    SinkProgress,
    check_monotonic,
    dead_letter_lines,
)

__all__ = [
    "JOB_KEYS",
    "JOB_NAME",
    "POLL_SECONDS",
    "PROCESS_SPECS",
    "ZK_ROOT",
    "RunFacts",
    "build_result",
    "ChaosError",
    "ChaosPlan",
    "ChaosRecords",
    "ChaosResult",
    "CheckpointPoint",
    "CheckpointSeen",
    "CheckpointWatcher",
    "DeadLetter",
    "Event",
    "EventKind",
    "JobProcess",
    "KillSnapshot",
    "Line",
    "Marker",
    "MonotonicReport",
    "ReplayReport",
    "Sample",
    "Schedule",
    "SinkProgress",
    "SinkRow",
    "Span",
    "Tally",
    "Timeline",
    "TimelineFigure",
    "TimelineRecorder",
    "chaos_titles",
    "check_monotonic",
    "checkpoint_points",
    "dead_letter_lines",
    "draw_chaos_result",
    "draw_timeline",
    "figures_json",
    "job_command",
    "job_config",
    "make_records",
    "make_schedule",
    "read_dead_letter_dir",
    "read_sink",
    "replay_windows",
    "run_chaos",
    "session_members",
    "tally",
    "throughput",
    "timeline_figure",
]
