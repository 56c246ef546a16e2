"""AWS sessions: region, profile and assumed role, resolved as boto3 and the AWS CLI do.

Region: the config's ``region``, else ``AWS_REGION``, ``AWS_DEFAULT_REGION``, the
profile's ``region`` in ``~/.aws/config`` (or ``AWS_CONFIG_FILE``), else
``us-east-1``. Profile: the config's ``profile``, else ``AWS_PROFILE`` (boto3
reads it itself, so environment credentials keep their precedence over it, as
in the AWS CLI), else the default credentials chain; a profile's own ``role_arn``
is botocore's to assume. Role: the config's ``role_arn`` (:class:`AssumedRole`) is
assumed with the profile's credentials, and its credentials are refreshed before
they expire. Every botocore session the project makes comes from
:func:`botocore_session`, which also writes each call to :data:`CALL_LOG_ENV`'s file
when that is set (what a job's IAM policy must allow).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from kinesis_spout.errors import ConfigError, CredentialsError

if TYPE_CHECKING:
    import botocore.session
    from botocore.exceptions import PartialCredentialsError

FALLBACK_REGION = "us-east-1"

CALL_LOG_ENV = "KSPOUT_CALL_LOG"
"""A file: when set, every AWS call this process's sessions make with the job's credentials
is appended to it as a ``service:Operation`` line (the executors' too, if it is set there):
what the job's IAM policy must allow. The AssumeRole calls of ``role_arn``, made with the
credentials it starts from, are not among them."""

ROLE_SECONDS = 3600
"""How long an assumed role's credentials last (STS' default); botocore refreshes them
15 minutes before they expire."""


@dataclass(frozen=True, slots=True)
class AssumedRole:
    """An IAM role every client of a config assumes (``role_arn`` and its companions)."""

    arn: str
    session_name: str
    external_id: str | None = None
    region: str | None = None
    """The region of the STS endpoint called (the config's)."""


def _profile_error(profile: str | None, env: Mapping[str, str]) -> ConfigError:
    where = os.environ.get("AWS_CONFIG_FILE", "~/.aws/config")
    name, value = ("profile", profile) if profile else ("AWS_PROFILE", env.get("AWS_PROFILE"))
    return ConfigError(name, value, f"a profile of {where} (or ~/.aws/credentials)")


def resolve_region(profile: str | None = None, env: Mapping[str, str] | None = None) -> str:
    """The region of a config that sets none (see the module docstring)."""
    env = os.environ if env is None else env
    for var in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        if env.get(var):
            return env[var]
    import botocore.session  # here: a config or variable that names the region skips it
    from botocore.exceptions import ProfileNotFound

    session = botocore.session.Session(profile=profile)
    try:
        region = session.get_config_variable("region")
    except ProfileNotFound:
        raise _profile_error(profile, env) from None
    return str(region) if region else FALLBACK_REGION


def botocore_session(
    profile: str | None = None, role: AssumedRole | None = None
) -> botocore.session.Session:
    """A botocore session of ``profile`` (None: ``AWS_PROFILE`` or the default chain),
    assuming ``role`` with that profile's credentials when given; a profile that does
    not exist is a :class:`ConfigError` naming it. Its calls go to the call log."""
    session = _profile_session(profile)
    if role is not None:
        from botocore.credentials import CredentialProvider

        refresh = assume_role_refresher(_profile_session(profile), role)

        class AssumeRoleProvider(CredentialProvider):  # type: ignore[misc]
            METHOD = CANONICAL_NAME = "kinesis-spout-assume-role"

            def load(self) -> Any:
                return assumed_role_credentials(refresh)

        # First in the chain: before the environment's credentials, which assume it.
        session.get_component("credential_provider").insert_before("env", AssumeRoleProvider())
    session.register("before-call", _log_call)
    return session


def boto_session(profile: str | None = None, role: AssumedRole | None = None) -> Any:
    """A boto3 session of ``profile`` and ``role`` (see :func:`botocore_session`)."""
    import boto3

    return boto3.session.Session(botocore_session=botocore_session(profile, role))


def _profile_session(profile: str | None) -> botocore.session.Session:
    import botocore.session
    from botocore.exceptions import ProfileNotFound

    session = botocore.session.Session(profile=profile)
    try:
        session.get_scoped_config()
    except ProfileNotFound:
        raise _profile_error(profile, os.environ) from None
    return session


Refresher = Callable[[], dict[str, str]]


def assume_role_refresher(base: botocore.session.Session, role: AssumedRole) -> Refresher:
    """A function that assumes ``role`` with ``base``'s credentials (one STS AssumeRole
    call) and returns the new credentials as botocore's refreshable credentials take
    them; a refused call is a :class:`CredentialsError` naming the role."""
    from botocore.exceptions import BotoCoreError, ClientError

    clients: list[Any] = []
    lock = threading.Lock()
    params: dict[str, Any] = {
        "RoleArn": role.arn,
        "RoleSessionName": role.session_name,
        "DurationSeconds": ROLE_SECONDS,
    }
    if role.external_id:
        params["ExternalId"] = role.external_id

    def refresh() -> dict[str, str]:
        with lock:  # botocore sessions are not thread-safe
            if not clients:
                clients.append(base.create_client("sts", region_name=role.region))
        try:
            creds = clients[0].assume_role(**params)["Credentials"]
        except (ClientError, BotoCoreError) as exc:
            raise CredentialsError(f"role_arn {role.arn!r}: AssumeRole failed: {exc}") from exc
        expiry = creds["Expiration"]
        return {
            "access_key": creds["AccessKeyId"],
            "secret_key": creds["SecretAccessKey"],
            "token": creds["SessionToken"],
            "expiry_time": expiry.isoformat() if isinstance(expiry, datetime) else str(expiry),
        }

    return refresh


def assumed_role_credentials(
    refresh: Refresher, clock: Callable[[], datetime] | None = None
) -> Any:
    """botocore credentials that call ``refresh`` on first use and again before they
    expire (``clock``: botocore's, timezone-aware, unless a test passes its own)."""
    from botocore.credentials import DeferredRefreshableCredentials

    if clock is None:
        return DeferredRefreshableCredentials(refresh, "kinesis-spout-assume-role")
    return DeferredRefreshableCredentials(refresh, "kinesis-spout-assume-role", clock)


_CALL_LOG_LOCK = threading.Lock()


def _log_call(model: Any = None, **_: Any) -> None:
    """``before-call`` handler: ``service:Operation`` to :data:`CALL_LOG_ENV`'s file."""
    path = os.environ.get(CALL_LOG_ENV)
    if not path or model is None:
        return
    line = f"{model.service_model.signing_name}:{model.name}\n".encode()
    with _CALL_LOG_LOCK:  # one write per line, appended: lines of processes do not mix
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)


def incomplete_credentials(exc: PartialCredentialsError) -> CredentialsError:
    """One line for botocore's partial credentials (a key id without its secret)."""
    missing, where = exc.kwargs.get("cred_var", "?"), exc.kwargs.get("provider", "?")
    said = "the environment" if where == "env" else where
    return CredentialsError(
        f"AWS credentials incomplete: {missing} is missing from {said} "
        "(set both AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or neither to use a profile)"
    )
