"""Poison isolation: which records fail a micro-batch, and whether they are poison.

Work that fails as a whole (a Spark job that fails, say a record that kills its
Python worker, or an exception escaping a transform or a sink) is run again in parts
(:func:`run_split`), down to what cannot be cut any more, within a split budget
(:func:`split_budget`). How a job is cut is a :class:`Cut`
(:data:`~kinesis_spout.spark.read.jobs.PLANS`: its read plans). What then fails alone
is judged (:class:`PoisonJudge`): poison, to be failed (retried, then dead-lettered),
or the sign of a systematic error (nothing works), which stops the job with
:class:`BatchFailedError` and nothing failed, so no good record is dead-lettered
because, say, Spark went away. A job whose executors cannot import kinesis_spout is not
cut at all: it stops at once with one line that says so (:func:`missing_on_executors`).
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from kinesis_spout.errors import KinesisSpoutError
from kinesis_spout.spark.process.arrow import format_error
from kinesis_spout.spark.process.contract import ProcessingContractError

log = logging.getLogger(__name__)

G = TypeVar("G")
"""A group of work run as one Spark job (rows of a micro-batch, read plans)."""
R = TypeVar("R")
"""What a job that ran returns, per part of its group."""
L = TypeVar("L")
"""What fails alone (a row, a read plan of one record)."""

LONE_FAILURES = 2
"""Lone failures in a batch where nothing else ran that are still treated as
poison (when the batch before ran fine)."""

POISON_MEMORY = 10_000
"""Message ids remembered as having failed alone (their retries are poison too)."""


def split_budget(size: int) -> int:
    """The splits a group of ``size`` (records, or records a read may take) may use."""
    return 4 * math.ceil(math.log2(max(size, 2))) + 4


class ExecutorEnvironmentError(KinesisSpoutError):
    """The executors' Python cannot import kinesis_spout: ship the environment."""


class BatchFailedError(KinesisSpoutError):
    """A micro-batch kept failing as a whole, even split into small parts."""

    retriable = True


@dataclass(slots=True)
class Isolation(Generic[L]):
    """Book-keeping of one micro-batch's splitting after failed runs."""

    splits_left: int
    splits: int = 0
    succeeded: bool = False
    """A part of the batch ran."""
    exhausted: bool = False
    """The split budget was used up before everything ran or failed alone."""
    alone: list[tuple[L, str]] = field(default_factory=list)
    """What failed alone, with its error, in the order found."""
    abandoned: int = 0
    """Groups left unfinished (stopping, given up, the budget used up)."""
    last_error: str = ""


def _no_rest(group: object, done: object) -> None:
    return None


@dataclass(frozen=True, slots=True)
class Cut(Generic[G, R, L]):
    """How a reading mode cuts a failed group (pure functions of the group)."""

    halves: Callable[[G], list[G]]
    """The parts to run again; ``[]``: it cannot be cut, it failed alone."""
    lone: Callable[[G], L]
    """What a group that cannot be cut is, as it goes into :attr:`Isolation.alone`."""
    describe: Callable[[G], str]
    """The group in a log line (``"rows 0..15"``)."""
    rest: Callable[[G, list[R]], G | None] = _no_rest
    """What is left to run after its parts ran fine (their results ``done``); None: nothing."""


def _never() -> bool:
    return False


def run_split(
    run: Callable[[G], list[R]],
    cut: Cut[G, R, L],
    iso: Isolation[L],
    group: G,
    *,
    batch_id: int,
    stopping: Callable[[], bool],
    cancelled: Callable[[], bool] = _never,
) -> list[R]:
    """The results of ``group`` run as one job; when it fails, of its parts (recursively).

    What fails alone goes to ``iso.alone``: :meth:`PoisonJudge.judge` decides later
    whether it is poison or the failure is systematic. While ``stopping`` (Spark may
    be going away with us) or once ``cancelled``, a failed group is left unfinished:
    its records are not checkpointed and come back after a restart, without costing
    a retry. Once ``cancelled`` no group starts (a part of a failed job, its rest).
    A :class:`ProcessingContractError` (a bug to fix) is raised at once.
    """
    return _Splitter(run, cut, iso, batch_id, stopping, cancelled).run(group)


@dataclass(slots=True)
class _Splitter(Generic[G, R, L]):
    """One micro-batch's :func:`run_split`."""

    job: Callable[[G], list[R]]
    cut: Cut[G, R, L]
    iso: Isolation[L]
    batch_id: int
    stopping: Callable[[], bool]
    cancelled: Callable[[], bool]

    def run(self, group: G) -> list[R]:
        if self.cancelled():  # given up while an earlier part ran: start nothing more
            self.iso.abandoned += 1
            return []
        try:
            done = self.job(group)
        except ProcessingContractError:
            raise
        except Exception as exc:
            missing = missing_on_executors(exc)  # no part of the batch would run either
            if missing is not None:
                raise missing from None
            return self._after_failure(group, format_error(exc))
        self.iso.succeeded = True
        return done

    def _after_failure(self, group: G, error: str) -> list[R]:
        iso, cut = self.iso, self.cut
        iso.last_error = error
        if self.cancelled():
            iso.abandoned += 1
            return []
        if self.stopping():
            log.warning(
                "abandoning %s of micro-batch %d while stopping: %s",
                cut.describe(group),
                self.batch_id,
                error,
            )
            iso.abandoned += 1
            return []
        parts = cut.halves(group)
        if not parts:
            iso.alone.append((cut.lone(group), error))
            return []
        if iso.splits_left <= 0:
            iso.exhausted = True
            iso.abandoned += 1
            return []
        iso.splits_left -= 1
        iso.splits += 1
        log.warning(
            "micro-batch %d: %s failed (%s); running again in %d parts",
            self.batch_id,
            cut.describe(group),
            error,
            len(parts),
        )
        found = len(iso.alone) + iso.abandoned
        out: list[R] = []
        for part in parts:
            out += self.run(part)
        go_on = len(iso.alone) + iso.abandoned == found
        go_on = go_on and not self.cancelled() and not self.stopping()
        rest = cut.rest(group, out) if go_on else None
        if rest is not None:  # the parts ran fine: the failure is in what is left
            out += self.run(rest)
        return out


@dataclass(frozen=True, slots=True)
class Wording:
    """What a reading mode's error texts call its lone failures and re-runs."""

    lone: str
    """What failed alone (``"records"``)."""
    left: str
    """What became of the unfinished records when nothing was failed."""
    over: str
    """What fails a micro-batch more often than the budget can isolate."""
    runs: str
    """What the re-runs are called (``"splits"``)."""


class PoisonJudge:
    """Remembers lone failures across batches, and whether the last batch ran."""

    def __init__(self, words: Wording) -> None:
        self.words = words
        self.healthy = False
        """The last batch ran (Spark and the processing worked a moment ago)."""
        self.poison: dict[str, None] = {}
        """Message ids that failed alone (their retries are poison too), oldest first."""

    def judge(
        self,
        batch_id: int,
        iso: Isolation[L],
        ids: Sequence[str],
        probe: Callable[[L], bool] | None = None,
    ) -> None:
        """Raise :class:`BatchFailedError` unless the lone failures look like poison;
        remember ``ids``, the message ids of those known (a lone failure may have none
        yet: a read of one record, read later to be failed).

        They are poison when another part of the batch ran, when each of them is the
        retry of a record known to fail alone, or when there are at most
        :data:`LONE_FAILURES` of them and Spark and the code worked a moment ago: the
        batch before ran, or else ``probe`` (a job beside the first lone failure, with
        nothing to read) runs now. Otherwise nothing has worked: the error is systematic
        and the job stops with nothing failed.
        """
        alone = len(iso.alone)
        known = bool(ids) and len(ids) == alone and all(i in self.poison for i in ids)
        before = self.healthy
        if iso.succeeded:
            self.healthy = True
        elif not known:
            self.healthy = False
        few = not iso.exhausted and alone <= LONE_FAILURES
        lone_ok = not iso.exhausted and (known or (before and few))
        if probe is not None and alone and not (iso.succeeded or lone_ok) and few:
            lone_ok = probe(iso.alone[0][0])
        if (iso.exhausted or alone) and not (iso.succeeded or lone_ok):
            w = self.words
            raise BatchFailedError(
                f"micro-batch {batch_id} failed as a whole even when split {iso.splits} times "
                f"({alone} {w.lone} failing alone"
                f"{', split budget used up' if iso.exhausted else ''}); {w.left}; "
                f"last error: {iso.last_error}"
            )
        self.remember(ids)

    def raise_if_exhausted(self, batch_id: int, iso: Isolation[Any]) -> None:
        """Stop the job when the split budget ran out (more fail it than it can isolate)."""
        if iso.exhausted:
            w = self.words
            raise BatchFailedError(
                f"micro-batch {batch_id}: more {w.over} than {iso.splits} {w.runs} can "
                f"isolate; last error: {iso.last_error}"
            )

    def remember(self, ids: Sequence[str]) -> None:
        """These records failed alone: their retries that fail alone are poison too."""
        for i in ids:
            self.poison[i] = None
        while len(self.poison) > POISON_MEMORY:
            del self.poison[next(iter(self.poison))]


_MISSING = (
    re.compile(r"No module named '(kinesis_spout|tracker)[.']"),
    re.compile(r"port number from kinesis_spout\.spark\.launch\.worker_daemon"),
)
_WORKER_PYTHON = re.compile(r"Error from python worker:\s+(\S+?):")


def missing_on_executors(error: BaseException) -> ExecutorEnvironmentError | None:
    """The one-line error of a Spark job that failed because the executors' Python has
    no kinesis_spout (None: it failed for another reason)."""
    text = str(error)
    if not any(p.search(text) for p in _MISSING):
        return None
    python = _WORKER_PYTHON.search(text)
    where = f" ({python.group(1)})" if python else ""
    return ExecutorEnvironmentError(
        f"the executors' Python{where} cannot import kinesis_spout: pass --ship-env to "
        "kinesis-spout run (it ships this virtualenv), or install kinesis-spout there "
        "(docs/deploy.md)"
    )
