"""Region and profile as boto3 and the AWS CLI resolve them (issue 26): the config's,
else AWS_REGION, AWS_DEFAULT_REGION, the profile's region (AWS_PROFILE or the
``profile`` field; a real config file through AWS_CONFIG_FILE), else us-east-1; and
the profile's credentials and region used by the clients, against the moto server
(moto keeps a stream per region)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kinesis_spout.cli import main
from kinesis_spout.config import SpoutConfig
from kinesis_spout.errors import ConfigError
from kinesis_spout.kinesis import client as client_module
from kinesis_spout.kinesis.client import make_client
from kinesis_spout.testing.servers import MotoServer
from kinesis_spout.testing.streams import create_stream, emulator_client

pytestmark = pytest.mark.integration


@pytest.fixture
def aws_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A real ~/.aws/config and credentials file; no region variables set."""
    config = tmp_path / "aws-config"
    config.write_text(
        "[default]\nregion = eu-north-1\n\n[profile other]\nregion = ap-south-1\n\n"
        "[profile noregion]\noutput = json\n"
    )
    creds = tmp_path / "aws-credentials"
    creds.write_text(
        "[other]\naws_access_key_id = AKIDOTHER\naws_secret_access_key = s\n\n"
        "[noregion]\naws_access_key_id = AKIDNOREGION\naws_secret_access_key = s\n"
    )
    for var in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(creds))
    monkeypatch.setattr(client_module, "_SESSIONS", {})  # sessions read the files once
    return config


def test_the_region_comes_from_the_config_the_variables_the_profile_then_us_east_1(
    aws_files: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert SpoutConfig().region == "eu-north-1"  # the default profile's
    assert SpoutConfig(profile="other").region == "ap-south-1"
    assert SpoutConfig(profile="noregion").region == "us-east-1"  # the last fallback
    monkeypatch.setenv("AWS_PROFILE", "other")
    assert SpoutConfig().region == "ap-south-1"
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-2")
    assert SpoutConfig().region == "eu-west-2"
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    assert SpoutConfig().region == "eu-west-1"
    assert SpoutConfig(region="sa-east-1").region == "sa-east-1"  # the config's wins
    monkeypatch.setenv("AWS_CONFIG_FILE", str(aws_files.with_name("missing")))
    monkeypatch.delenv("AWS_REGION")
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    monkeypatch.delenv("AWS_PROFILE")
    assert SpoutConfig().region == "us-east-1"


def test_config_shows_the_region_of_the_environment(
    aws_files: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    assert main(["config"]) == 0
    assert json.loads(capsys.readouterr().out)["region"] == "eu-west-1"


def test_an_unknown_profile_is_a_config_error_naming_it(
    aws_files: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ConfigError, match="profile='nosuch'"):
        SpoutConfig(profile="nosuch")
    monkeypatch.setenv("AWS_PROFILE", "gone")
    with pytest.raises(ConfigError, match="AWS_PROFILE='gone'"):
        SpoutConfig()


def test_clients_use_the_profile_credentials_and_region(
    aws_files: Path,
    moto_server: MotoServer,
    unique_name: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    endpoint = moto_server.endpoint_url
    create_stream(emulator_client(endpoint, region="ap-south-1"), unique_name, 1)
    cfg = SpoutConfig(profile="other", endpoint_url=endpoint, stream_name=unique_name)
    client = make_client(cfg.endpoint_url, cfg.region, profile=cfg.profile)
    assert client.meta.region_name == "ap-south-1"
    assert client._request_signer._credentials.access_key == "AKIDOTHER"
    names = client.list_streams()["StreamNames"]
    assert unique_name in names
    store = f"file://{tmp_path / 'cp'}"
    common = [
        "--endpoint-url",
        endpoint,
        "--stream-name",
        unique_name,
        "--no-lag",
        "--checkpoint-store",
        store,
        "--dead-letter",
        "none",
    ]
    assert main(["status", "--profile", "other", *common]) == 0  # ap-south-1: found
    assert unique_name in capsys.readouterr().out
    assert main(["status", *common]) == 1  # the default profile's eu-north-1: no such stream
    assert unique_name in capsys.readouterr().err
