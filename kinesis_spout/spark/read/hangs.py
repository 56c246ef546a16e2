"""Finding a record that makes every read task of its shard hang: the reads are halved.

A read task that runs past ``task_timeout`` is given up (its Spark job cancelled) and its
shard is read again from the same position, since nothing of it was tracked. A record on
which the user's function hangs *every* time would make each new read of the shard hang
in turn, and the shard would stall for good. So, as with a record that kills its worker
(:mod:`~kinesis_spout.spark.isolation`), the reads are halved:

* once a read of ``limit`` records of a shard hangs, the shard's next reads take at most
  half as many, halved again at each hang;
* a read of one record that hangs has found the record: it is failed alone (read on the
  driver, retried, dead-lettered after ``retry_limit``:
  :meth:`~kinesis_spout.spark.read.planner.ExecutorReadPlanner.fail_alone`), and the shard
  reads on after it at full size;
* the search also ends once the shard has read, without a hang, as many records as the
  first hung read could hold, or up to its tip: the hang did not come back (a slow
  moment, not a record). The driver reads the one record at the next steps of its
  loop (behind a long gap of empty pages, or after errors, over several reads), with
  no task of the shard meanwhile
  (:meth:`~kinesis_spout.spark.read.planner.ExecutorReadPlanner.walk`); only when
  the driver holds no tracker of the shard (let go meanwhile) is the shard's next read
  of that one record again (:meth:`HangSearch.unread`);
* a job whose Spark jobs have not started a task yet waits for Spark, not on a record
  (:meth:`~kinesis_spout.spark.read.jobs.ReadJobs.task_counts`): it is not given up
  then, and its ``task_timeout`` counts from when its tasks start (their latest start
  or end: :mod:`~kinesis_spout.spark.read.deadlines`).

Each hang costs ``task_timeout``, so a search costs at most 1 + log2(limit) of them (15
for a ``batch_size`` of 10,000). The halves are the shard's reads in the next
micro-batches; the other shards read on meanwhile. A retry task that hangs is halved by the
micro-batch loop (:mod:`~kinesis_spout.spark.executor_driver`), its halves run at once;
one of a single record fails it (:meth:`ExecutorReadPlanner.hung`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class _Search:
    cap: int
    """The most records the shard's next reads take."""
    left: int
    """Records of the first hung read's range not read yet."""


class HangSearch:
    """The shards whose reads hung, and how many records their next reads may take."""

    def __init__(self) -> None:
        self._searches: dict[str, _Search] = {}

    def cap(self, shard_id: str) -> int | None:
        """The most records the shard's next read may take (None: no search, no cap)."""
        search = self._searches.get(shard_id)
        return None if search is None else search.cap

    def hung(self, shard_id: str, limit: int) -> bool:
        """A read of at most ``limit`` records of the shard was given up. True when it
        was a read of one record: that record hangs alone (fail it, then :meth:`found`)."""
        if limit <= 1:
            return True
        search = self._searches.get(shard_id)
        if search is None:
            self._searches[shard_id] = _Search(limit // 2, limit)
        else:
            search.cap = max(min(search.cap, limit) // 2, 1)
        return False

    def unread(self, shard_id: str) -> None:
        """The record that hung alone was not failed, and the driver does not read on to
        it (it holds no tracker of the shard, let go meanwhile): the shard's next read is
        of that one record again; one that does not hang ends the search."""
        self._searches[shard_id] = _Search(1, 1)

    def found(self, shard_id: str) -> None:
        """The record that hung alone was failed: the shard reads at full size again."""
        self._searches.pop(shard_id, None)

    def read(self, shard_id: str, n: int, caught_up: bool = False) -> None:
        """``n`` records of the shard were read and tracked; ``caught_up``: the read
        reached the shard's tip, so past everything the hung read could have held."""
        search = self._searches.get(shard_id)
        if search is not None and (n or caught_up):
            search.left -= n
            if search.left <= 0 or caught_up:
                del self._searches[shard_id]
