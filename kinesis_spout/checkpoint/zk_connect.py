"""Connecting the ZooKeeper store: digest credentials, the kazoo client, its start.

kazoo's own log lines go through :data:`kazoo_log`, whose filter masks the
digest password (:data:`~kinesis_spout.checkpoint.zk_layout.secret_filter`).
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    AuthFailedError,
    ConnectionClosedError,
    ConnectionLoss,
    KazooException,
    NoAuthError,
    OperationTimeoutError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry
from kazoo.security import ACL, make_digest_acl

from kinesis_spout.checkpoint.zk_layout import ZkUrl, secret_filter
from kinesis_spout.errors import CheckpointError, CheckpointStoreUnavailableError, ConfigError

log = logging.getLogger(__name__)

#: kazoo's own log lines go through this logger, whose filter masks the digest password.
kazoo_log = logging.getLogger("kinesis_spout.checkpoint.zookeeper.kazoo")
kazoo_log.addFilter(secret_filter)

#: kazoo errors that mean "not now" (the connection), not "no".
RETRIABLE = (ConnectionLoss, SessionExpiredError, OperationTimeoutError, KazooTimeoutError)


@dataclass(frozen=True, slots=True)
class Connection:
    """A started kazoo client for a ``zk://`` URL, with its ACL and secrets."""

    client: KazooClient
    url: ZkUrl
    acl: list[ACL] | None
    secrets: tuple[str, ...]


def connect(
    url: str, job_name: str, *, auth: str | None, session_timeout: float, connect_timeout: float
) -> Connection:
    """Connect to the ensemble of ``url`` (digest credentials and ACLs with ``auth``)."""
    parsed = ZkUrl.parse(url)
    acl, auth_data, secrets = _digest(auth)
    client = KazooClient(
        hosts=parsed.hosts,
        timeout=session_timeout,
        auth_data=auth_data,
        connection_retry=KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=1.0),
        logger=kazoo_log,
    )
    log.info(
        "connecting to ZooKeeper %s for job %r%s",
        parsed,
        job_name,
        " with digest ACLs" if auth else "",
    )
    _start(client, parsed, connect_timeout, secrets)
    return Connection(client, parsed, acl, secrets)


def _digest(
    auth: str | None,
) -> tuple[list[ACL] | None, list[tuple[str, str]] | None, tuple[str, ...]]:
    """(ACL, kazoo auth data, secrets to mask) for ``user:password`` digest auth."""
    if auth is None:
        return None, None, ()
    user, sep, password = auth.partition(":")
    if not sep or not user or not password:
        raise ConfigError("zk_auth", "***", "user:password")
    secrets = (auth, password)
    for secret in secrets:
        secret_filter.add(secret)
    return [make_digest_acl(user, password, all=True)], [("digest", auth)], secrets


def _start(client: KazooClient, parsed: ZkUrl, timeout: float, secrets: tuple[str, ...]) -> None:
    """Connect ``client``; on failure stop it (no client left reconnecting) and raise ours."""
    try:
        client.start(timeout=timeout)
    except (KazooTimeoutError, KazooException) as exc:
        with contextlib.suppress(Exception):
            client.stop()
            client.close()
        forget(secrets)
        if isinstance(exc, KazooTimeoutError):
            raise CheckpointStoreUnavailableError(
                f"ZooKeeper {parsed} not reachable within {timeout:.0f}s"
            ) from None
        raise CheckpointError(
            f"cannot connect to ZooKeeper {parsed}: {type(exc).__name__}"
        ) from None


def forget(secrets: tuple[str, ...]) -> None:
    for secret in secrets:
        secret_filter.discard(secret)


# --- the store ----------------------------------------------------------------------


def wait_for(
    async_result: Any,
    what: str,
    expect: tuple[type[Exception], ...],
    timeout: float,
    where: str,
    store: str,
) -> Any:
    """:meth:`ZooKeeperCheckpointStore.wait`, as a function of its parts."""
    try:
        return async_result.get(timeout=timeout)
    except expect:
        raise
    except RETRIABLE as exc:
        raise CheckpointStoreUnavailableError(
            f"ZooKeeper {where}: {what} failed: {type(exc).__name__}"
        ) from None
    except ConnectionClosedError:
        raise CheckpointError(f"{store} is closed ({what})") from None
    except (NoAuthError, AuthFailedError) as exc:
        raise CheckpointError(
            f"ZooKeeper refused {what}: {type(exc).__name__} (check zk_auth and the node ACLs)"
        ) from None
    except KazooException as exc:
        raise CheckpointError(f"ZooKeeper {where}: {what} failed: {exc!r}") from None
