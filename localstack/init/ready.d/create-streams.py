"""LocalStack init hook (READY stage): create the demo Kinesis stream(s).

LocalStack runs ``*.py`` files of ``/etc/localstack/init/ready.d`` inside its
own Python once it is ready (in docker, and in host mode under
``$FILESYSTEM_ROOT/etc/localstack/init``), so boto3 and LocalStack's internal
client are at hand; nothing needs to be installed.

``KINESIS_DEMO_STREAMS`` (default ``demo:4``) lists ``name[:shards]``,
comma-separated. A stream that already exists is left alone. The hook waits
until each stream is ACTIVE, so "LocalStack is ready" means "the stream can be
read". (Not ``KINESIS_SPOUT_*``: the job rejects unknown variables with that
prefix.)
"""

from __future__ import annotations

import os
import time

from localstack.aws.connect import connect_to

DEFAULT_STREAMS = "demo:4"


def parse_streams(spec: str) -> list[tuple[str, int]]:
    """``"demo:4,orders"`` -> ``[("demo", 4), ("orders", 1)]``."""
    out = []
    for item in spec.split(","):
        name, _, shards = item.strip().partition(":")
        if not name:
            continue
        try:
            count = int(shards or "1")
        except ValueError:
            raise SystemExit(
                f"KINESIS_DEMO_STREAMS: bad shard count {shards!r} for stream {name!r}"
            ) from None
        if count < 1:
            raise SystemExit(f"KINESIS_DEMO_STREAMS: shard count of {name!r} must be >= 1")
        out.append((name, count))
    return out


def create_streams(spec: str, region: str, timeout: float = 60.0) -> None:
    kinesis = connect_to(region_name=region).kinesis
    for name, shards in parse_streams(spec):
        try:
            kinesis.create_stream(StreamName=name, ShardCount=shards)
            print(f"create-streams: creating {name} with {shards} shard(s) in {region}")
        except kinesis.exceptions.ResourceInUseException:
            print(f"create-streams: {name} exists already")
        deadline = time.monotonic() + timeout
        while True:
            summary = kinesis.describe_stream_summary(StreamName=name)
            if summary["StreamDescriptionSummary"]["StreamStatus"] == "ACTIVE":
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"create-streams: {name} not ACTIVE after {timeout:.0f}s")
            time.sleep(0.2)
        print(f"create-streams: {name} is ACTIVE")


# LocalStack exec()s this file with fresh globals (no __name__ == "__main__").
create_streams(
    os.environ.get("KINESIS_DEMO_STREAMS", DEFAULT_STREAMS),
    os.environ.get("AWS_DEFAULT_REGION", "us-east-1"),
)
