"""Start and stop LocalStack (Kinesis only) on this machine, without docker.

    .venv/bin/python localstack/run_localstack.py start [--port 4566]
    .venv/bin/python localstack/run_localstack.py status
    .venv/bin/python localstack/run_localstack.py stop
    .venv/bin/python localstack/run_localstack.py run     # foreground, Ctrl-C stops

``start`` returns once LocalStack answers and the init hooks of
``localstack/init`` have run (the ``demo`` stream exists), then prints the
endpoint URL; its files and log live in ``--dir`` (default
``.cache/localstack-run``), its pid in ``<dir>/localstack.pid``. ``stop``
sends SIGTERM, then SIGKILL after 5 s, to LocalStack and the kinesis-mock it
started. Run it with the project's virtualenv (it uses
``devkit.localstack``); LocalStack itself runs from
``.cache/localstack-venv`` (``scripts/setup-common.sh``: ``ensure_localstack``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from devkit.localstack import LocalStackServer, descendants  # noqa: E402
from kinesis_spout.errors import KinesisSpoutError  # noqa: E402
from kinesis_spout.testing.servers import port_open  # noqa: E402

DEFAULT_DIR = REPO / ".cache" / "localstack-run"


def _pid_file(workdir: Path) -> Path:
    return workdir / "localstack.pid"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _running_pid(workdir: Path) -> int | None:
    try:
        pid = int(_pid_file(workdir).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return pid if _alive(pid) else None


def _server(args: argparse.Namespace) -> LocalStackServer:
    env = {"KINESIS_DEMO_STREAMS": args.streams} if args.streams else {}
    init = None if args.no_init else REPO / "localstack" / "init"
    return LocalStackServer(args.port, args.dir, init_dir=init, extra_env=env)


def cmd_start(args: argparse.Namespace) -> int:
    pid = _running_pid(args.dir)
    if pid is not None:
        print(f"LocalStack already running (pid {pid}); `stop` it first", file=sys.stderr)
        return 1
    if port_open(args.port):
        print(f"port {args.port} is in use; choose another with --port", file=sys.stderr)
        return 1
    args.dir.mkdir(parents=True, exist_ok=True)
    server = _server(args)
    server.start()
    assert server.proc is not None
    _pid_file(args.dir).write_text(f"{server.proc.pid} {args.port}\n")
    print(server.endpoint_url)
    print(f"log: {server.log_path}", file=sys.stderr)
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    args.dir.mkdir(parents=True, exist_ok=True)
    server = _server(args)
    stop = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    with server:
        print(f"LocalStack on {server.endpoint_url} (log {server.log_path}); Ctrl-C stops")
        while not stop and server.running:
            time.sleep(0.2)
    return 0


def cmd_stop(args: argparse.Namespace) -> int:
    pid = _running_pid(args.dir)
    if pid is None:
        print("LocalStack is not running", file=sys.stderr)
        _pid_file(args.dir).unlink(missing_ok=True)
        return 0
    children = descendants(pid)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + LocalStackServer.stop_timeout
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    for child in children:  # kinesis-mock runs in a process group of its own
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(child, signal.SIGKILL)
    _pid_file(args.dir).unlink(missing_ok=True)
    print(f"stopped LocalStack (pid {pid})", file=sys.stderr)
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    pid = _running_pid(args.dir)
    if pid is None:
        print("not running")
        return 1
    port = _pid_file(args.dir).read_text().split()[1]
    print(f"running: pid {pid}, http://127.0.0.1:{port}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["start", "stop", "status", "run"])
    parser.add_argument("--port", type=int, default=4566, help="gateway port on 127.0.0.1")
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="files, log and pid")
    parser.add_argument(
        "--streams",
        default=None,
        help="streams the init hook creates, name[:shards],... (default demo:4)",
    )
    parser.add_argument("--no-init", action="store_true", help="do not run localstack/init")
    args = parser.parse_args(argv)
    args.dir = args.dir.resolve()
    handler = {"start": cmd_start, "stop": cmd_stop, "status": cmd_status, "run": cmd_run}
    try:
        return handler[args.command](args)
    except KinesisSpoutError as exc:
        print(f"run_localstack: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
