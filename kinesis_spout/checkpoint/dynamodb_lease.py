"""The job lease of a ``dynamodb://`` store: an item with an owner, a counter and an expiry.

The ``@job-lease`` item has KCL's lease shape for the whole job. Taking it is one
conditional PutItem (absent, expired, or its holder dead on this host), a heartbeat thread
renews it every third of its length, and it is **lost** when a renewal finds another owner
or this process's own monotonic clock says it ran out (``lost`` turns true, ``on_lost`` is
called). While it is held, every checkpoint write of the job is fenced on it in a
transaction (:func:`held_lease`, :mod:`.dynamodb_writes`). States: ``new -> held ->
released``, ``held -> lost``. The item and the rules: docs/checkpoints.md ("The job lease
item").
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kinesis_spout.checkpoint.dynamodb_layout import DynamoUrl, JobKeys, item_where
from kinesis_spout.checkpoint.dynamodb_table import (
    ConditionFailed,
    DynamoTable,
    dynamodb_client,
    get_n,
    get_s,
    n,
    s,
)
from kinesis_spout.checkpoint.lease_holder import (
    LeaseWaiter,
    describe_holder,
    holder_info,
    holder_is_gone,
)
from kinesis_spout.errors import CheckpointError, StaleCheckpointError

if TYPE_CHECKING:
    from kinesis_spout.aws import AssumedRole

log = logging.getLogger(__name__)

_HELD: dict[tuple[tuple[str, str], str], DynamoDbJobLease] = {}
_HELD_LOCK = threading.Lock()


def held_lease(table: DynamoTable, job: str) -> DynamoDbJobLease | None:
    """The lease of ``job`` on ``table`` this process holds, if any: its stores' writes
    are fenced by it."""
    with _HELD_LOCK:
        return _HELD.get((table.ident, job))


@dataclass(frozen=True, slots=True)
class LeaseItem:
    """The lease item as stored (read by ``status`` and by a taker)."""

    owner: str
    holder: str | None
    """The holder's JSON record (:func:`~kinesis_spout.checkpoint.joblease.holder_info`)."""
    counter: int
    expires_at: float

    @classmethod
    def read(cls, table: DynamoTable, keys: JobKeys) -> LeaseItem | None:
        """The item now (a strongly consistent read), or None."""
        got = table.call("GetItem", Key=_key(keys), ConsistentRead=True).get("Item")
        if got is None:
            return None
        return cls(
            get_s(got, "owner") or "",
            get_s(got, "holder"),
            int(get_n(got, "lease_counter") or 0),
            get_n(got, "expires_at") or 0.0,
        )


class DynamoDbJobLease:
    """The job lease item of ``job_name`` in ``table``; see the module docstring.

    ``wall`` (epoch seconds, what ``expires_at`` is in) and ``clock`` (monotonic, this
    holder's own view of its expiry) are injectable.
    """

    def __init__(
        self,
        table: DynamoTable,
        job_name: str,
        *,
        lease_seconds: float,
        reader: str | None = None,
        wall: Callable[[], float] = time.time,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.table = table
        self.keys = JobKeys(job_name)
        self.job_name = job_name
        self.reader = reader
        self.seconds = lease_seconds
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
        self.where = item_where(table.name, self.keys.lease())
        self.on_lost: Callable[[], None] | None = None
        """Called (on the heartbeat thread) when a held lease is lost."""
        self._wall = wall
        self._clock = clock
        self._lock = threading.Lock()
        self._held = False
        self._lost = False
        self._valid_until = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def open(
        cls,
        url: str,
        job_name: str,
        *,
        region: str | None = None,
        profile: str | None = None,
        role: AssumedRole | None = None,
        reader: str | None = None,
    ) -> DynamoDbJobLease:
        """The lease of ``job_name`` in the table of ``url`` (not yet acquired), reached in
        ``region`` with ``profile``, assuming ``role`` when given."""
        parsed = DynamoUrl.parse(url)
        table = DynamoTable(parsed.table, dynamodb_client(region, profile, role))
        return cls(table, job_name, lease_seconds=parsed.lease_seconds, reader=reader)

    # -- taking it ----------------------------------------------------------------------
    def acquire(self, wait: bool = False, timeout: float | None = None) -> None:
        self.table.ensure()
        LeaseWaiter(self._try_once).run(self.job_name, self.where, wait, timeout)

    def _try_once(self) -> str | None:
        """None: taken; else who holds it."""
        for _ in range(2):
            item = LeaseItem.read(self.table, self.keys)
            now = self._wall()
            if item is not None and item.expires_at > now:
                if not holder_is_gone(item.holder):
                    return describe_holder(item.holder)
                log.warning(
                    "job %r: the lease holder %s is dead (its lease not yet expired): "
                    "taking the lease over",
                    self.job_name,
                    describe_holder(item.holder),
                )
            started = self._clock()
            try:
                self._put(item, now)
            except ConditionFailed:
                continue  # another taker got in first: read again
            with self._lock:
                self._held, self._lost = True, False
                self._valid_until = started + self.seconds
            with _HELD_LOCK:
                _HELD[(self.table.ident, self.job_name)] = self
            self._start_heartbeat()
            return None
        return "a process that just took it"

    def _put(self, item: LeaseItem | None, now: float) -> None:
        holder = json.dumps(holder_info(self.job_name, self.reader))
        values: dict[str, Any] = {}
        if item is None:
            condition = "attribute_not_exists(pk)"
        else:
            condition = "#o = :old AND lease_counter = :counter"
            values = {":old": s(item.owner), ":counter": n(item.counter)}
        self.table.call(
            "PutItem",
            Item={
                **_key(self.keys),
                "owner": s(self.owner),
                "holder": s(holder),
                "lease_counter": n((item.counter if item else 0) + 1),
                "expires_at": n(now + self.seconds),
                "lease_seconds": n(self.seconds),
            },
            ConditionExpression=condition,
            **({"ExpressionAttributeNames": {"#o": "owner"}} if values else {}),
            **({"ExpressionAttributeValues": values} if values else {}),
        )

    # -- keeping it ---------------------------------------------------------------------
    def _start_heartbeat(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._beat, name=f"job-lease-{self.job_name}", daemon=True
        )
        self._thread.start()

    def _beat(self) -> None:
        wait = self.seconds / 3
        while not self._stop.wait(wait):
            renewed = self._renew()
            if renewed is None:
                return
            wait = self.seconds / 3 if renewed else min(1.0, self.seconds / 6)

    def _renew(self) -> bool | None:
        """Renew; True: renewed, False: not this time (retried soon), None: lost."""
        started, now = self._clock(), self._wall()
        if started >= self._valid_until:
            self._lose(f"not renewed within its {self.seconds:g}s")
            return None
        try:
            self.table.call(
                "UpdateItem",
                Key=_key(self.keys),
                UpdateExpression="SET expires_at = :e, lease_counter = lease_counter + :one",
                ConditionExpression="#o = :me",
                ExpressionAttributeNames={"#o": "owner"},
                ExpressionAttributeValues={
                    ":e": n(now + self.seconds),
                    ":one": n(1),
                    ":me": s(self.owner),
                },
            )
        except ConditionFailed:
            self._lose("another process took it over")
            return None
        except CheckpointError as exc:
            log.warning("job %r: renewing the job lease failed, will retry: %s", self.job_name, exc)
            return False
        with self._lock:
            if not self._lost:
                self._valid_until = started + self.seconds
        return True

    def _lose(self, why: str) -> None:
        with self._lock:
            if self._lost or not self._held:
                return
            self._lost = True
        log.error(
            "job %r: the job lease %s was lost (%s): another reader may take it; this one stops",
            self.job_name,
            self.where,
            why,
        )
        if self.on_lost is not None:
            self.on_lost()

    @property
    def lost(self) -> bool:
        """Lost, or past its expiry by this process's clock (the heartbeat may not have
        run yet: a process just resumed after a pause)."""
        with self._lock:
            return self._lost or (self._held and self._clock() >= self._valid_until)

    # -- fencing (the store's writes) -----------------------------------------------------
    def fence(self, what: str) -> dict[str, Any]:
        """The transaction action that checks this lease is still this process's;
        :class:`StaleCheckpointError` at once if it is lost already."""
        if self.lost:
            raise self.refused(what)
        return {
            "ConditionCheck": {
                "TableName": self.table.name,
                "Key": _key(self.keys),
                "ConditionExpression": "#o = :me AND expires_at > :now",
                "ExpressionAttributeNames": {"#o": "owner"},
                "ExpressionAttributeValues": {":me": s(self.owner), ":now": n(self._wall())},
            }
        }

    def refused(self, what: str) -> StaleCheckpointError:
        """The error of a write ``what`` that the lease no longer allows."""
        return StaleCheckpointError(
            f"the job lease {self.where} is no longer this process's (expired or taken "
            f"over): {what} refused"
        )

    # -- letting it go ------------------------------------------------------------------
    def release(self) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(5.0)
        with _HELD_LOCK:
            if _HELD.get((self.table.ident, self.job_name)) is self:
                del _HELD[(self.table.ident, self.job_name)]
        if self._held and not self.lost:
            with contextlib.suppress(CheckpointError):  # else it expires by itself
                self.table.call(
                    "DeleteItem",
                    Key=_key(self.keys),
                    ConditionExpression="#o = :me",
                    ExpressionAttributeNames={"#o": "owner"},
                    ExpressionAttributeValues={":me": s(self.owner)},
                )
        self._held = False


def _key(keys: JobKeys) -> dict[str, Any]:
    return {k: s(v) for k, v in keys.lease().items()}
