"""The assumed-role fields of the configuration: their checks and the default session name.

STS takes a role ARN of an IAM role, a session name of 2-64 characters of ``\\w+=,.@-``
and an external ID of 2-1224 characters of ``\\w+=,.@:/-``; a value it would refuse is a
:class:`~kinesis_spout.errors.ConfigError` when the config is built, not an AccessDenied
on the first call of an executor.
"""

from __future__ import annotations

import re

from kinesis_spout.errors import ConfigError

ROLE_ARN = re.compile(r"arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]{1,512}")
SESSION_NAME = re.compile(r"[\w+=,.@-]{2,64}")
EXTERNAL_ID = re.compile(r"[\w+=,.@:/-]{2,1224}")


def default_session_name(job_name: str) -> str:
    """``kinesis-spout-<job_name>``, with characters STS refuses turned into ``-``, cut to 64."""
    return re.sub(r"[^\w+=,.@-]", "-", f"kinesis-spout-{job_name}")[:64]


def check_role(role_arn: str | None, session_name: str | None, external_id: str | None) -> None:
    """The role fields as STS takes them; a session name or external ID needs a role."""
    if role_arn is None:
        for name, value in (("role_session_name", session_name), ("external_id", external_id)):
            if value is not None:
                raise ConfigError(name, value, "set only with role_arn (the role it goes with)")
        return
    if not ROLE_ARN.fullmatch(role_arn):
        raise ConfigError("role_arn", role_arn, "an IAM role ARN: arn:aws:iam::ACCOUNT:role/NAME")
    if session_name is not None and not SESSION_NAME.fullmatch(session_name):
        raise ConfigError(
            "role_session_name", session_name, "2-64 characters of letters, digits and _+=,.@-"
        )
    if external_id is not None and not EXTERNAL_ID.fullmatch(external_id):
        raise ConfigError(
            "external_id", external_id, "2-1224 characters of letters, digits and _+=,.@:/-"
        )
