"""Settings of ``python -m kinesis_spout.multilang``: file < Storm conf < flags."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kinesis_spout.errors import ConfigError
from kinesis_spout.multilang.adapter import StormContext
from kinesis_spout.multilang.main import (
    build_parser,
    message_timeout_from_storm,
    resolve_settings,
    storm_settings,
)


def storm(conf: dict[str, Any]) -> StormContext:
    return StormContext(conf=conf, pid_dir="/tmp", context={})


def resolve(argv: list[str], conf: dict[str, Any]) -> Any:
    return resolve_settings(build_parser().parse_args(argv), storm(conf), env={})


def test_message_timeout_is_a_safety_net_beyond_storms_2t() -> None:
    assert message_timeout_from_storm({"topology.message.timeout.secs": 30}) == 65.0
    assert message_timeout_from_storm({}) is None
    for bad in (0, -3, "30", True):
        with pytest.raises(ConfigError, match="topology.message.timeout.secs"):
            message_timeout_from_storm({"topology.message.timeout.secs": bad})


def test_storm_conf_keys() -> None:
    spout, opts = storm_settings(
        {
            "kinesis.spout.stream_name": "orders",
            "kinesis.spout.multilang.need_task_ids": False,
            "topology.workers": 2,
        }
    )
    assert spout == {"stream_name": "orders"}
    assert opts == {"need_task_ids": False}
    with pytest.raises(ConfigError, match=r"kinesis\.spout\.stream\b"):
        storm_settings({"kinesis.spout.stream": "typo"})


def test_layering_file_then_storm_then_flags(tmp_path: Path) -> None:
    toml = tmp_path / "job.toml"
    toml.write_text(
        'stream_name = "from-file"\nretry_limit = 1\nmessage_timeout = 9.0\n'
        'checkpoint_store = "memory://"\n'
    )
    conf = {
        "topology.message.timeout.secs": 10,
        "kinesis.spout.retry_limit": 4,
        "kinesis.spout.multilang.emits_per_next": 20,
        "kinesis.spout.multilang.output_stream": "records",
    }
    cfg, opts = resolve(["--config", str(toml)], conf)
    assert cfg.stream_name == "from-file"
    assert cfg.retry_limit == 4  # Storm conf beats the file
    assert cfg.message_timeout == 25.0  # derived from Storm's timeout
    assert (opts.emits_per_next, opts.output_stream, opts.need_task_ids) == (20, "records", True)

    cfg, opts = resolve(
        [
            "--config",
            str(toml),
            "--retry-limit",
            "2",
            "--message-timeout",
            "3",
            "--emits-per-next",
            "5",
            "--no-need-task-ids",
        ],
        conf,
    )
    assert (cfg.retry_limit, cfg.message_timeout) == (2, 3.0)  # flags win
    assert (opts.emits_per_next, opts.need_task_ids) == (5, False)


def test_explicit_storm_message_timeout_wins_over_derived() -> None:
    cfg, _ = resolve(
        ["--checkpoint-store", "memory://"],
        {"topology.message.timeout.secs": 10, "kinesis.spout.message_timeout": 0},
    )
    assert cfg.message_timeout == 0.0


def test_max_spout_pending_caps_the_default_batch_only() -> None:
    _, opts = resolve([], {"topology.max.spout.pending": 8})
    assert opts.emits_per_next == 8
    _, opts = resolve(
        [], {"topology.max.spout.pending": 8, "kinesis.spout.multilang.emits_per_next": 50}
    )
    assert opts.emits_per_next == 50
    _, opts = resolve([], {"topology.max.spout.pending": None})
    assert opts.emits_per_next == 100


def test_bad_values_name_the_key() -> None:
    with pytest.raises(ConfigError, match="retry_limit"):
        resolve([], {"kinesis.spout.retry_limit": "lots"})
    with pytest.raises(ConfigError, match="multilang.idle_sleep"):
        resolve([], {"kinesis.spout.multilang.idle_sleep": 5})


def test_parallelism_from_the_topology_context() -> None:
    from kinesis_spout.multilang.coordinated import require_shared_store, storm_parallelism

    ctx = {
        "task->component": {"1": "kinesis", "2": "kinesis", "3": "bolt", "4": "__acker"},
        "componentid": "kinesis",
        "taskid": 2,
    }
    assert storm_parallelism(ctx) == 2
    assert storm_parallelism({"componentid": "kinesis"}) == 1
    assert storm_parallelism({}) == 1
    cfg, _ = resolve(["--checkpoint-store", "file://./cp"], {})
    require_shared_store(cfg, 1, "kinesis")
    with pytest.raises(ConfigError, match=r"checkpoint_store=.*zk://.*'kinesis' as 2 tasks"):
        require_shared_store(cfg, 2, "kinesis")
    zk, _ = resolve(["--checkpoint-store", "zk://127.0.0.1:2181/ks"], {})
    require_shared_store(zk, 2, "kinesis")


def test_include_stream_name_from_the_storm_conf_and_flags() -> None:
    _, opts = resolve([], {})
    assert opts.include_stream_name is False  # existing topologies keep their layout
    key = "kinesis.spout.multilang.include_stream_name"
    _, opts = resolve([], {key: True})
    assert opts.include_stream_name is True
    _, opts = resolve(["--include-stream-name"], {})
    assert opts.include_stream_name is True
    _, opts = resolve(["--no-include-stream-name"], {key: True})
    assert opts.include_stream_name is False  # flags win
    with pytest.raises(ConfigError, match=r"multilang\.include_stream_name='often'"):
        resolve([], {key: "often"})


def test_the_streams_read_from_the_file_the_storm_conf_or_the_flags(tmp_path: Path) -> None:
    toml = tmp_path / "job.toml"
    toml.write_text('streams = ["orders", "payments"]\ncheckpoint_store = "memory://"\n')
    cfg, _ = resolve(["--config", str(toml)], {})
    assert cfg.stream_names == ("orders", "payments")
    cfg, _ = resolve(["--config", str(toml)], {"kinesis.spout.streams": ["clicks", "views"]})
    assert cfg.stream_names == ("clicks", "views")
    cfg, _ = resolve(["--config", str(toml)], {"kinesis.spout.stream_name": "clicks"})
    assert cfg.stream_names == ("clicks",)  # the conf's stream replaces the file's streams
    # a flag naming streams replaces whatever the conf named, stream_name or streams
    cfg, _ = resolve(
        ["--config", str(toml), "--stream", "a", "--stream", "b"],
        {"kinesis.spout.stream_name": "clicks"},
    )
    assert cfg.stream_names == ("a", "b")
    cfg, _ = resolve(
        ["--config", str(toml), "--stream-name", "c"], {"kinesis.spout.streams": ["x"]}
    )
    assert cfg.stream_names == ("c",)
    with pytest.raises(ConfigError, match="streams"):
        resolve([], {"kinesis.spout.streams": ["orders", "no spaces please"]})
