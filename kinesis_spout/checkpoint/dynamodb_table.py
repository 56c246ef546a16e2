"""The DynamoDB table of a ``dynamodb://TABLE`` store: its client, its calls, its errors.

Every item of the store, the job lease and the batch-end records goes through
:meth:`DynamoTable.call`, where botocore's errors become the project's: throttling, a
transaction cancelled for throttling or a conflict, a 5xx answer or a dropped connection
is tried again with jittered backoff, then is
:class:`~kinesis_spout.errors.CheckpointStoreUnavailableError` naming the table (saved at
the next round); access denied is one :class:`~kinesis_spout.errors.CheckpointError` line
naming the table and the action; a failed condition is :class:`ConditionFailed`, a
cancelled transaction :class:`TransactionCancelled`. :meth:`DynamoTable.ensure` makes a
missing table (on-demand). :func:`dynamodb_client` makes one client per region, profile,
role, endpoint and credentials in a process. docs/checkpoints.md ("The DynamoDB store").
"""

from __future__ import annotations

import logging
import os
import random
import re
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kinesis_spout.errors import CheckpointError, CheckpointStoreUnavailableError
from kinesis_spout.retrying import retrying
from tracker import Backoff, ExponentialBackoff, JitteredBackoff

if TYPE_CHECKING:
    from kinesis_spout.aws import AssumedRole

log = logging.getLogger(__name__)

KEY_SCHEMA = [
    {"AttributeName": "pk", "KeyType": "HASH"},
    {"AttributeName": "sk", "KeyType": "RANGE"},
]
ATTRIBUTES = [
    {"AttributeName": "pk", "AttributeType": "S"},
    {"AttributeName": "sk", "AttributeType": "S"},
]
THROTTLED = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "RequestLimitExceeded",
        "LimitExceededException",
        "InternalServerError",
        "ServiceUnavailable",
    }
)
"""Error codes that pass with time: tried again after a backoff."""
TRANSIENT_REASONS = frozenset(
    {"ThrottlingError", "ProvisionedThroughputExceeded", "RequestLimitExceeded"}
    | {"TransactionConflict", "InternalServerError"}
)
"""Reasons a transaction was cancelled that pass with time."""
DENIED = frozenset(
    {
        "AccessDeniedException",
        "UnrecognizedClientException",
        "InvalidSignatureException",
        "MissingAuthenticationTokenException",
        "ExpiredTokenException",
        "InvalidClientTokenId",
    }
)
_PERFORM = re.compile(r"perform: (dynamodb:\w+)")
"""The action an IAM refusal names ("... is not authorized to perform: dynamodb:PutItem")."""
ATTEMPTS = 6
"""Calls of one operation while it is throttled, before the caller hears "unavailable"."""
DEADLINE = 10.0
"""Seconds one operation may take with its retries (the ZooKeeper store's call bound)."""


class ConditionFailed(CheckpointError):
    """A conditional write found another item than it expected: ``item`` (None: none,
    or not returned)."""

    def __init__(self, what: str, item: dict[str, Any] | None) -> None:
        super().__init__(f"{what}: the condition failed")
        self.item = item


class TransactionCancelled(CheckpointError):
    """A transaction was cancelled: ``reasons`` has one ``{"Code": ..., "Item": ...}``
    per action, in order (``"None"``: that action was fine)."""

    def __init__(self, what: str, reasons: list[dict[str, Any]]) -> None:
        codes = ", ".join(str(r.get("Code")) for r in reasons)
        super().__init__(f"{what}: transaction cancelled ({codes})")
        self.reasons = reasons


class TableMissingError(CheckpointStoreUnavailableError):
    """The table does not exist (deleted while in use: nothing can be saved until it is
    back; retriable, as an unreachable store)."""


class AccessDeniedError(CheckpointError):
    """IAM refused a call: ``detail`` names the actions and the answer."""

    def __init__(self, table: str, detail: str) -> None:
        super().__init__(f"DynamoDB table {table!r}: access denied to {detail}")
        self.detail = detail


class _InUse(CheckpointError):
    """CreateTable of a table another process is creating."""


class _Transient(CheckpointStoreUnavailableError):
    """Throttled, a 5xx answer, a dropped connection: worth another try."""


_CLIENTS: dict[tuple[str, str | None, AssumedRole | None, str | None, str | None], Any] = {}
_CLIENTS_LOCK = threading.Lock()
_READY: set[tuple[str, str]] = set()
"""Tables known to exist and be ACTIVE in this process, by (client endpoint, name)."""


def endpoint_override() -> str | None:
    """The DynamoDB endpoint set in the environment (None: AWS's for the region)."""
    return os.environ.get("AWS_ENDPOINT_URL_DYNAMODB") or os.environ.get("AWS_ENDPOINT_URL")


def dynamodb_client(
    region: str | None = None, profile: str | None = None, role: AssumedRole | None = None
) -> Any:
    """The DynamoDB client of ``region`` (None: as boto3 resolves it), ``profile`` and
    ``role`` (the config's assumed role, None: the profile's own credentials), one per
    process for each endpoint and access key in the environment (boto3 clients are
    thread-safe; two roles never share one), with short timeouts and botocore's own
    retries off (:meth:`DynamoTable.call` backs off itself)."""
    from botocore.config import Config

    from kinesis_spout.aws import boto_session, resolve_region

    region = region or resolve_region(profile)
    key = (region, profile, role, endpoint_override(), os.environ.get("AWS_ACCESS_KEY_ID"))
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(key)
        if client is None:
            config = Config(
                connect_timeout=5,
                read_timeout=10,
                retries={"total_max_attempts": 1, "mode": "standard"},
                max_pool_connections=32,
            )
            session = boto_session(profile, role)
            client = session.client("dynamodb", region_name=region, config=config)
            _CLIENTS[key] = client
    return client


def iam_action(operation: str, params: dict[str, Any] | None = None) -> list[str]:
    """The IAM actions a call needs: ``dynamodb:<operation>``, or for a transaction
    those of its actions (``ConditionCheck`` is ``dynamodb:ConditionCheckItem``)."""
    if operation != "TransactWriteItems":
        return [f"dynamodb:{operation}"]
    names = {"ConditionCheck": "ConditionCheckItem", "Put": "PutItem"}
    names.update(Update="UpdateItem", Delete="DeleteItem")
    kinds = {k for item in (params or {}).get("TransactItems", []) for k in item}
    return sorted(f"dynamodb:{names[k]}" for k in kinds)


class DynamoTable:
    """One table and the client that reaches it; see the module docstring.

    ``backoff``, ``sleep`` and ``clock`` are injectable (tests)."""

    def __init__(
        self,
        name: str,
        client: Any,
        *,
        backoff: Backoff | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self.client = client
        jittered = JitteredBackoff(ExponentialBackoff(0.05, cap=1.0), random.Random())
        self.backoff = backoff or jittered
        self._sleep = sleep
        self._clock = clock

    @property
    def ident(self) -> tuple[str, str]:
        """(endpoint, table name): the same table for every client that reaches it."""
        return (str(self.client.meta.endpoint_url), self.name)

    def call(self, operation: str, **params: Any) -> dict[str, Any]:
        """``operation`` (``"PutItem"``...) with ``params`` (``TableName`` added where the
        operation takes one), retried while transient; errors as the module docstring says."""
        if operation != "TransactWriteItems":
            params.setdefault("TableName", self.name)
        method = getattr(self.client, _snake(operation))

        def once() -> dict[str, Any]:
            try:
                answer: dict[str, Any] = method(**params)
            except Exception as exc:  # botocore's, translated here and only here
                raise self._translate(exc, operation, params) from exc
            return answer

        return retrying(
            f"DynamoDB {operation} on table {self.name!r}",
            once,
            backoff=self.backoff,
            attempts=ATTEMPTS,
            deadline=self._clock() + DEADLINE,
            retriable=lambda exc: isinstance(exc, _Transient),
            sleep=self._sleep,
            clock=self._clock,
            level=logging.DEBUG,
            logger=log,
        )

    def _translate(self, exc: Exception, operation: str, params: dict[str, Any]) -> Exception:
        from botocore.exceptions import (
            BotoCoreError,
            ClientError,
            HTTPClientError,
            NoCredentialsError,
        )
        from botocore.exceptions import ConnectionError as BotoConnectionError

        table = f"DynamoDB table {self.name!r}"
        if isinstance(exc, NoCredentialsError):
            return CheckpointError(f"{table}: no AWS credentials found ({exc})")
        if isinstance(exc, BotoConnectionError | HTTPClientError):
            return _Transient(f"{table}: {operation} failed: {type(exc).__name__}: {exc}")
        if isinstance(exc, BotoCoreError):
            return CheckpointError(f"{table}: {operation} failed: {type(exc).__name__}: {exc}")
        if not isinstance(exc, ClientError):
            return exc
        err = exc.response.get("Error") or {}
        code, message = _one_line(str(err.get("Code") or ""), str(err.get("Message") or exc))
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
        if code == "ConditionalCheckFailedException":
            return ConditionFailed(f"{table}: {operation}", exc.response.get("Item"))
        if code == "TransactionCanceledException":
            reasons = list(exc.response.get("CancellationReasons") or [])
            codes = {str(r.get("Code")) for r in reasons} - {"None"}
            if codes and codes <= TRANSIENT_REASONS:
                return _Transient(f"{table}: {operation} cancelled ({', '.join(sorted(codes))})")
            return TransactionCancelled(f"{table}: {operation}", reasons)
        if code in THROTTLED or status >= 500:
            return _Transient(f"{table}: {operation} throttled or failed ({code}: {message})")
        if code in DENIED or status == 403:
            named = _PERFORM.search(message)
            actions = named.group(1) if named else " and ".join(iam_action(operation, params))
            return AccessDeniedError(self.name, f"{actions} ({code}: {message})")
        if code == "ResourceNotFoundException":
            return TableMissingError(f"{table} does not exist ({message})")
        if code == "ResourceInUseException":
            return _InUse(f"{table}: {operation}: in use ({message})")
        return CheckpointError(f"{table}: {operation} failed ({code}: {message})")

    # -- the table itself --------------------------------------------------------------
    def ensure(self, create: bool = True) -> bool:
        """Whether the table exists (and is ACTIVE, with this store's key schema); when it
        is missing and ``create``, create it (on-demand billing) and wait until ACTIVE."""
        if self.ident in _READY:
            return True
        try:
            table = self.call("DescribeTable")["Table"]
        except TableMissingError:
            if not create:
                return False
            table = self._create()
        if table.get("TableStatus") != "ACTIVE":
            table = self._wait_active()
        self._check_schema(table)
        _READY.add(self.ident)
        return True

    def _create(self) -> dict[str, Any]:
        log.info("creating DynamoDB table %r (on-demand billing)", self.name)
        try:
            answer = self.call(
                "CreateTable",
                KeySchema=KEY_SCHEMA,
                AttributeDefinitions=ATTRIBUTES,
                BillingMode="PAY_PER_REQUEST",
            )
        except _InUse:  # made meanwhile by another process
            return self._wait_active()
        except AccessDeniedError as exc:
            raise CheckpointError(
                f"DynamoDB table {self.name!r} does not exist and cannot be created: access "
                f"denied to {exc.detail}; create it (docs/checkpoints.md) or allow "
                "dynamodb:CreateTable"
            ) from None
        description: dict[str, Any] = answer["TableDescription"]
        return description

    def _wait_active(self, timeout: float = 300.0) -> dict[str, Any]:
        deadline = self._clock() + timeout
        while True:
            table: dict[str, Any] = self.call("DescribeTable")["Table"]
            if table.get("TableStatus") == "ACTIVE":
                return table
            if self._clock() >= deadline:
                raise CheckpointStoreUnavailableError(
                    f"DynamoDB table {self.name!r} not ACTIVE after {timeout:g}s "
                    f"(status {table.get('TableStatus')})"
                )
            self._sleep(1.0)

    def _check_schema(self, table: dict[str, Any]) -> None:
        keys = {k["AttributeName"]: k["KeyType"] for k in table.get("KeySchema", [])}
        attributes = table.get("AttributeDefinitions", [])
        types = {a["AttributeName"]: a["AttributeType"] for a in attributes}
        if keys != {"pk": "HASH", "sk": "RANGE"} or [types.get("pk"), types.get("sk")] != ["S"] * 2:
            raise CheckpointError(
                f"DynamoDB table {self.name!r} has key schema {keys} ({types}): this store needs "
                "a string partition key 'pk' and a string sort key 'sk' (docs/checkpoints.md); "
                "name another table"
            )


def _one_line(code: str, message: str) -> tuple[str, str]:
    """An error's code and message on one line (an XML error body: its code and message)."""
    if "<Message>" in message:
        xml_code = re.search(r"<Code>(.*?)</Code>", message, re.S)
        xml_message = re.search(r"<Message>(.*?)</Message>", message, re.S)
        code = xml_code.group(1) if xml_code else code
        message = xml_message.group(1) if xml_message else message
    return code, " ".join(message.split())


def _snake(operation: str) -> str:
    """``PutItem`` -> ``put_item`` (boto3's method name)."""
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in operation).lstrip("_")


def s(value: str) -> dict[str, str]:
    """A string attribute value."""
    return {"S": value}


def n(value: float) -> dict[str, str]:
    """A number attribute value (an int stays an int)."""
    return {"N": str(value) if isinstance(value, int) else repr(float(value))}


def get_s(item: dict[str, Any], name: str) -> str | None:
    value = item.get(name)
    return str(value["S"]) if isinstance(value, dict) and "S" in value else None


def get_n(item: dict[str, Any], name: str) -> float | None:
    value = item.get(name)
    try:
        return float(value["N"]) if isinstance(value, dict) and "N" in value else None
    except ValueError:
        return None
