"""What AWS calls a test's code made, and with which credentials.

* :class:`MotoRequests`: moto server's request recorder (its ``/moto-api/recorder/``
  endpoints) over a block: every request the server got, with its headers (the access key
  that signed it) and its body (an STS call's parameters), whichever process sent it.
* :func:`caller_arn`: who an access key is, as moto's STS says (GetCallerIdentity signed
  with it; moto reads the key, not the signature): an assumed role's session ARN;
  :func:`client_as_role`: a client of a role (moto keeps each account's resources apart,
  by the account of the key that signs: a role of another account sees that account's).
* :func:`read_call_log`: the ``service:Operation`` lines of the project's call log
  (:data:`~kinesis_spout.aws.CALL_LOG_ENV`).
* :func:`executor_env`: environment variables for the Python workers of a running
  SparkSession (its context's ``environment``, which every Python function Spark runs
  carries; workers with other variables are other processes).
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self
from urllib.parse import parse_qs

import boto3

_CREDENTIAL = re.compile(r"Credential=([^/]+)/[^/]+/[^/]+/([^/]+)/")


@dataclass(frozen=True)
class RecordedRequest:
    """One request moto's server got."""

    method: str
    url: str
    headers: dict[str, str]
    body: bytes

    @property
    def access_key(self) -> str | None:
        found = _CREDENTIAL.search(self.headers.get("Authorization", ""))
        return found.group(1) if found else None

    @property
    def service(self) -> str | None:
        """The signing name of the credential scope: ``kinesis``, ``s3``, ``sts``."""
        found = _CREDENTIAL.search(self.headers.get("Authorization", ""))
        return found.group(2) if found else None

    @property
    def operation(self) -> str:
        """The JSON protocol's ``X-Amz-Target`` operation, a query protocol's ``Action``,
        else ``METHOD path``."""
        target = self.headers.get("X-Amz-Target")
        if target:
            return target.rpartition(".")[2]
        action = self.params.get("Action")
        return action or f"{self.method} {self.url}"

    @property
    def params(self) -> dict[str, str]:
        """A form-encoded body's parameters (an STS call's)."""
        try:
            pairs = parse_qs(self.body.decode(), keep_blank_values=True)
        except UnicodeDecodeError:
            return {}
        return {k: v[0] for k, v in pairs.items()}


class MotoRequests:
    """moto's request recorder over a ``with`` block (reset, started, stopped)."""

    def __init__(self, endpoint_url: str) -> None:
        self.endpoint_url = endpoint_url.rstrip("/")

    def _call(self, action: str, method: str = "POST") -> bytes:
        url = f"{self.endpoint_url}/moto-api/recorder/{action}"
        request = urllib.request.Request(url, data=b"" if method == "POST" else None)
        with urllib.request.urlopen(request, timeout=30) as resp:
            body: bytes = resp.read()
        return body

    def __enter__(self) -> Self:
        self._call("stop-recording")
        self._call("reset-recording")
        self._call("start-recording")
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._call("stop-recording")

    def requests(self) -> list[RecordedRequest]:
        """Every request recorded, in order."""
        out = []
        for line in self._call("download-recording", "GET").decode().splitlines():
            if not line.strip():
                continue
            entry = json.loads(line)
            body = entry.get("body") or ""
            raw = base64.b64decode(body) if entry.get("body_encoded") else body.encode()
            headers = {str(k): str(v) for k, v in (entry.get("headers") or {}).items()}
            out.append(RecordedRequest(entry["method"], entry["url"], headers, raw))
        return out


def caller_arn(endpoint_url: str, access_key: str) -> str:
    """The ARN moto's STS gives the caller of ``access_key`` (an assumed role's session:
    ``arn:aws:sts::ACCOUNT:assumed-role/ROLE/SESSION``)."""
    sts: Any = boto3.session.Session().client(
        "sts",
        endpoint_url=endpoint_url,
        region_name="us-east-1",
        aws_access_key_id=access_key,
        aws_secret_access_key="not-checked",
        aws_session_token="not-checked",
    )
    return str(sts.get_caller_identity()["Arn"])


def client_as_role(endpoint_url: str, role_arn: str, service: str = "kinesis") -> Any:
    """A boto3 client of ``service`` with the credentials of ``role_arn`` (assumed once)."""
    sts: Any = boto3.client("sts", endpoint_url=endpoint_url, region_name="us-east-1")
    creds = sts.assume_role(RoleArn=role_arn, RoleSessionName="owner")["Credentials"]
    return boto3.client(
        service,
        endpoint_url=endpoint_url,
        region_name="us-east-1",
        aws_access_key_id=creds["AccessKeyId"],
        aws_secret_access_key=creds["SecretAccessKey"],
        aws_session_token=creds["SessionToken"],
    )


def read_call_log(path: Path) -> set[str]:
    """The distinct ``service:Operation`` lines of a call log (none written: empty)."""
    if not path.exists():
        return set()
    return {line.strip() for line in path.read_text().splitlines() if line.strip()}


@contextlib.contextmanager
def executor_env(spark: Any, **variables: str) -> Iterator[None]:
    """``variables`` in the environment of the Python workers of ``spark``'s jobs
    started within the block (the earlier values back after it)."""
    env: dict[str, Any] = spark.sparkContext.environment
    before = {name: env.get(name) for name in variables}
    env.update(variables)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                env.pop(name, None)
            else:
                env[name] = value
