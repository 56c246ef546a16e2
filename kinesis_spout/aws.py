"""AWS region and profile, resolved as boto3 and the AWS CLI do.

Region: the config's ``region``, else ``AWS_REGION``, ``AWS_DEFAULT_REGION``, the
profile's ``region`` in ``~/.aws/config`` (or ``AWS_CONFIG_FILE``), else
``us-east-1``. Profile: the config's ``profile``, else ``AWS_PROFILE`` (boto3
reads it itself, so environment credentials keep their precedence over it, as
in the AWS CLI), else the default credentials chain. Every boto3 session the
project makes comes from :func:`boto_session` with the config's profile.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kinesis_spout.errors import ConfigError, CredentialsError

if TYPE_CHECKING:
    import botocore.session
    from botocore.exceptions import PartialCredentialsError

FALLBACK_REGION = "us-east-1"


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


def botocore_session(profile: str | None = None) -> botocore.session.Session:
    """A botocore session of ``profile`` (None: ``AWS_PROFILE`` or the default chain);
    a profile that does not exist is a :class:`ConfigError` naming it."""
    import botocore.session
    from botocore.exceptions import ProfileNotFound

    session = botocore.session.Session(profile=profile)
    try:
        session.get_scoped_config()
    except ProfileNotFound:
        raise _profile_error(profile, os.environ) from None
    return session


def boto_session(profile: str | None = None) -> Any:
    """A boto3 session of ``profile`` (see :func:`botocore_session`)."""
    import boto3

    return boto3.session.Session(botocore_session=botocore_session(profile))


def incomplete_credentials(exc: PartialCredentialsError) -> CredentialsError:
    """One line for botocore's partial credentials (a key id without its secret)."""
    missing, where = exc.kwargs.get("cred_var", "?"), exc.kwargs.get("provider", "?")
    said = "the environment" if where == "env" else where
    return CredentialsError(
        f"AWS credentials incomplete: {missing} is missing from {said} "
        "(set both AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or neither to use a profile)"
    )
