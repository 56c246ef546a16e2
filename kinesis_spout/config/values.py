"""Constants and enums of the configuration (shared by its checks)."""

from __future__ import annotations

import enum
import re

ENV_PREFIX = "KINESIS_SPOUT_"
MAX_RECORDS_PER_CALL = 10_000


class InitialPosition(enum.Enum):
    """Where a shard with no checkpoint starts."""

    TRIM_HORIZON = "TRIM_HORIZON"
    LATEST = "LATEST"
    AT_TIMESTAMP = "AT_TIMESTAMP"


READ_ON = ("executors",)
"""Where the Spark job may read Kinesis (``read_on``): on the executors, the one read path
(the driver reads of earlier releases are gone)."""

DEAD_LETTER_REASONS = ("exhausted", "expired")
"""Why a record is given up (``dead_letter_on``): its retries ran out, or it grew
older than ``max_record_age``."""

CONSUMERS = ("polling", "efo")
"""How shards are read (``consumer``): GetRecords polling, or enhanced fan-out."""

CONSUMER_NAME = re.compile(r"[a-zA-Z0-9_.-]{1,128}")
"""An enhanced fan-out consumer's name as Kinesis accepts it (``consumer_name``)."""
CONSUMER_NAME_RULE = "1..128 characters of a-z, A-Z, 0-9, _ . -"
