"""Where the job's driver may run: checks of ``--deploy-mode``."""

from __future__ import annotations

from kinesis_spout.config import SpoutConfig
from kinesis_spout.errors import ConfigError


def check_deploy_mode(config: SpoutConfig, deploy_mode: str) -> None:
    """In cluster deploy mode the driver may move to another machine between runs:
    its checkpoints and dead letters must not be on its local disk."""
    if deploy_mode != "cluster":
        return
    if config.checkpoint_store.startswith("file://"):
        raise ConfigError(
            "checkpoint_store",
            config.checkpoint_store,
            "a zk:// or dynamodb:// store in deploy mode cluster (the driver can move; a "
            "file:// store would stay behind on the old machine)",
        )
    if config.dead_letter != "none" and not config.dead_letter.startswith("s3://"):
        raise ConfigError(
            "dead_letter",
            config.dead_letter,
            "s3://bucket/prefix or 'none' in deploy mode cluster (a directory is on the "
            "driver's local disk, which can move); or run with --deploy-mode client",
        )
