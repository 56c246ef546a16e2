"""Bad input through the real command line, in a terminal of 80 columns: one line on
stderr (the exact first line checked), no traceback, a clear exit status (2 bad input,
1 the command could not do its work), and the close match where there is one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kinesis_spout.testing.servers import free_port

NO_KAZOO = """
import sys
class NoKazoo:  # a virtualenv without the zookeeper extra
    def find_spec(self, name, path=None, target=None):
        if name == "kazoo" or name.startswith("kazoo."):
            raise ModuleNotFoundError("No module named 'kazoo'")
sys.meta_path.insert(0, NoKazoo())
from kinesis_spout.cli import main
sys.exit(main(sys.argv[1:]))
"""


def run(*args: str, cwd: Path, code: str | None = None, **env: str) -> tuple[int, str, str]:
    """``kinesis-spout ARGS`` (or the Python ``code`` given): exit status, stdout, stderr."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "KINESIS_SPOUT_"))}
    full = {**base, "COLUMNS": "80", "AWS_EC2_METADATA_DISABLED": "true", **env}
    command = (
        [sys.executable, "-c", code, *args]
        if code
        else [str(Path(sys.executable).with_name("kinesis-spout")), *args]
    )
    proc = subprocess.run(command, capture_output=True, text=True, cwd=cwd, env=full, timeout=60)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, proc.stdout, proc.stderr


def first_line(err: str) -> str:
    return err.splitlines()[0] if err else ""


def test_a_mistyped_subcommand_says_did_you_mean(tmp_path: Path) -> None:
    code, _, err = run("stauts", cwd=tmp_path)
    assert code == 2
    assert err.splitlines() == [
        "kinesis-spout: error: unknown command 'stauts'; did you mean status?"
    ]
    code, _, err = run("dead-letters", "lsit", cwd=tmp_path)
    assert code == 2
    assert first_line(err) == (
        "kinesis-spout dead-letters: error: unknown command 'lsit'; did you mean list?"
    )


def test_no_flag_is_taken_by_an_abbreviation(tmp_path: Path) -> None:
    """``--stream payments`` once read as ``--stream-name``; ``--job`` as ``--job-name``."""
    code, _, err = run("dead-letters", "list", "--job", "billing", cwd=tmp_path)
    assert (code, err.splitlines()) == (
        2,
        ["kinesis-spout dead-letters list: error: unknown flag --job; did you mean --json?"],
    )


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            "zk://127.0.0.1/",
            "kinesis-spout checkpoints: error: invalid config checkpoint_store='zk://127.0.0.1/': "
            "host:port pairs: zk://host:port[,host:port...]/root, e.g. "
            "zk://127.0.0.1:2181/kinesis-spout",
        ),
        (
            "zk://127.0.0.1:2181/ks",
            "kinesis-spout checkpoints: error: invalid config "
            "checkpoint_store='zk://127.0.0.1:2181/ks': needs kazoo, which is not installed: "
            "pip install 'kinesis-spout[zookeeper]'",
        ),
    ],
)
def test_a_zookeeper_store_without_kazoo_checks_the_url_then_names_the_extra(
    tmp_path: Path, url: str, expected: str
) -> None:
    for command in (["checkpoints"], ["status"]):
        code, _, err = run(*command, "--checkpoint-store", url, cwd=tmp_path, code=NO_KAZOO)
        assert code == 2
        assert err.splitlines() == [expected.replace("checkpoints:", f"{command[0]}:")]


def test_partial_credentials_are_one_line(tmp_path: Path) -> None:
    port = free_port()  # nothing listens: the credentials are refused before any call
    code, _, err = run(
        "status",
        "--stream-name",
        "orders",
        "--endpoint-url",
        f"http://127.0.0.1:{port}",
        cwd=tmp_path,
        AWS_ACCESS_KEY_ID="AKIAEXAMPLE",
    )
    assert code == 1
    assert err.splitlines() == [
        "kinesis-spout status: error: AWS credentials incomplete: AWS_SECRET_ACCESS_KEY is "
        "missing from the environment (set both AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
        "or neither to use a profile)"
    ]


def test_a_misspelt_region_says_did_you_mean(tmp_path: Path) -> None:
    code, _, err = run("status", "--region", "us-eest-1", cwd=tmp_path)
    assert code == 2
    assert err.splitlines() == [
        "kinesis-spout status: error: invalid config region='us-eest-1': a region of AWS "
        "(botocore's list; any name with endpoint_url); did you mean us-east-1?"
    ]


def test_dead_letters_before_the_first_dead_letter(tmp_path: Path) -> None:
    code, out, err = run("dead-letters", "list", "--stream-name", "orders", cwd=tmp_path)
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        "0 dead letters in ./dead-letter (job 'kinesis-spout', stream 'orders')"
    ]


def test_help_and_usage_fit_80_columns(tmp_path: Path) -> None:
    for command in (
        ["status"],
        ["checkpoints"],
        ["checkpoints", "reset"],
        ["dead-letters", "list"],
        ["dead-letters", "redrive"],
    ):
        code, out, _ = run(*command, "--help", cwd=tmp_path)
        assert code == 0
        assert max(len(line) for line in out.splitlines()) <= 80, (command, out)


def test_an_unreachable_zookeeper_is_one_line_and_exit_1_for_every_command(
    tmp_path: Path,
) -> None:
    """``checkpoints`` once printed ~40 lines of kazoo's reconnect WARNINGs and exited 2,
    where ``status`` printed one line and exited 1."""
    url = f"zk://127.0.0.1:{free_port()}/ks"  # nothing listens there
    for command, within in ((["status", "--timeout", "2"], 2), (["checkpoints"], 15)):
        code, out, err = run(*command, "--checkpoint-store", url, cwd=tmp_path)
        assert (code, out) == (1, "")
        assert err.splitlines() == [
            f"kinesis-spout {command[0]}: error: ZooKeeper {url} not reachable within {within}s"
        ]


def test_an_html_error_body_is_cut_to_its_first_line() -> None:
    """A 500 with an HTML page (a region that does not exist, behind a proxy) once printed
    the page's every line after the error."""
    from botocore.exceptions import ClientError

    from kinesis_spout.errors import TransientKinesisError
    from kinesis_spout.kinesis.api import translate

    page = "<!doctype html>\n<html>\n<head><title>500</title></head>\n<body>oops</body>\n</html>"
    exc = ClientError(
        {"Error": {"Code": "500", "Message": page}, "ResponseMetadata": {"HTTPStatusCode": 500}},
        "DescribeStreamSummary",
    )
    out = translate(exc, "DescribeStreamSummary orders")
    assert isinstance(out, TransientKinesisError)
    assert str(out) == "DescribeStreamSummary orders: 500: <!doctype html>"


def test_a_long_error_keeps_what_to_do_at_its_end() -> None:
    """An error of ours names a path (a lease file under a deep folder) and ends with
    what to do; the one-line form of 300 characters cut that off."""
    from kinesis_spout.words import one_line

    msg = f"job 'x' is already running (lease /tmp/{'d' * 300}/.job.lock); stop it, or wait"
    assert one_line(msg) == msg
    assert one_line("x" * 5000 + "\n<html>").endswith("…")
