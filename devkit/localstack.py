"""LocalStack in host mode (no docker) as a Kinesis emulator: :class:`LocalStackServer`.

LocalStack 4.9.2 runs from its own virtualenv (``.cache/localstack-venv``,
made by ``ensure_localstack`` in ``scripts/setup-common.sh``): its
dependencies clash with the project's and newer releases do not import on
Python 3.11. Started as ``python -m localstack.runtime.main`` with the
environment of :data:`HOST_MODE_ENV`, it serves the AWS API on
``127.0.0.1:<port>`` and runs kinesis-mock (npm ``kinesis-local``) as its
Kinesis engine, on a port it picks itself.

LocalStack installs that engine with ``npm install`` on the first Kinesis
call unless ``<var_libs>/kinesis-local/<version>/node_modules/kinesis-local/main.js``
exists, where ``var_libs`` is ``$FILESYSTEM_ROOT/var/lib/localstack/lib`` in
host mode and ``<version>`` is :data:`LOCALSTACK_KINESIS_MOCK_VERSION`. The
launcher links a copy installed ahead of time (``.cache/localstack-libs``)
there, and refuses to start without it, so a test run never downloads.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from kinesis_spout.testing.servers import (
    LOOPBACK,
    REPO_ROOT,
    BackendUnavailableError,
    KinesisEmulator,
)

LOCALSTACK_VERSION = "4.9.2"
LOCALSTACK_KINESIS_MOCK_VERSION = "0.4.13"
"""``kinesis-local`` version LocalStack 4.9.2 asks for (its ``KINESIS_MOCK_VERSION`` default)."""

log = logging.getLogger(__name__)

HOST_MODE_ENV: dict[str, str] = {
    "OVERRIDE_IN_DOCKER": "0",  # these machines have /.dockerenv
    "GATEWAY_SERVER": "hypercorn",  # the default gateway binds 0.0.0.0
    "SERVICES": "kinesis",
    "DNS_ADDRESS": "0",
    "SKIP_SSL_CERT_DOWNLOAD": "1",
    "DISABLE_EVENTS": "1",
    "KINESIS_PERSISTENCE": "0",
    "KINESIS_LATENCY": "0",
    "KINESIS_MOCK_LOG_LEVEL": "WARN",
    "LOCALSTACK_CLI": "0",
}
"""What LocalStack needs on these machines besides ``GATEWAY_LISTEN`` and ``FILESYSTEM_ROOT``."""

INIT_STAGES = ("boot.d", "start.d", "ready.d", "shutdown.d")


def find_localstack_python() -> Path:
    """LocalStack's virtualenv Python: ``$LOCALSTACK_PYTHON``, else the repo's ``.cache``."""
    explicit = os.environ.get("LOCALSTACK_PYTHON")
    default = REPO_ROOT / ".cache" / "localstack-venv" / "bin" / "python"
    path = Path(explicit) if explicit else default
    if not path.exists():
        raise BackendUnavailableError(
            f"LocalStack's virtualenv not found ({path}): run `bash -c 'source "
            "scripts/setup-common.sh && ensure_localstack'` or set LOCALSTACK_PYTHON"
        )
    return path


def find_kinesis_local_package(version: str = LOCALSTACK_KINESIS_MOCK_VERSION) -> Path:
    """The pre-installed ``kinesis-local/<version>`` folder LocalStack would otherwise download.

    ``$LOCALSTACK_LIBS`` (default ``.cache/localstack-libs``) holds
    ``kinesis-local/<version>/node_modules/kinesis-local/main.js``.
    """
    libs = Path(os.environ.get("LOCALSTACK_LIBS") or REPO_ROOT / ".cache" / "localstack-libs")
    folder = libs / "kinesis-local" / version
    main_js = folder / "node_modules" / "kinesis-local" / "main.js"
    if not main_js.exists():
        raise BackendUnavailableError(
            f"LocalStack's Kinesis engine not pre-installed ({main_js} missing): run `npm install "
            f"--prefix {folder} kinesis-local@{version}` (ensure_localstack does it)"
        )
    return folder


class LocalStackServer(KinesisEmulator):
    """LocalStack (Kinesis only) on ``127.0.0.1:<port>``, files under its workdir.

    ``init_dir`` is a LocalStack init folder (``ready.d/`` etc., like
    ``localstack/init``): its scripts are copied in and run by LocalStack;
    the server counts as ready only once the READY stage has completed.
    ``extra_env`` is passed to LocalStack (and to its init scripts).
    """

    name = "localstack"
    kind = "localstack"
    start_timeout = 120.0
    stop_timeout = 5.0
    """Seconds between SIGTERM and SIGKILL."""

    def __init__(
        self,
        port: int | None = None,
        workdir: str | Path | None = None,
        *,
        init_dir: str | Path | None = None,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        super().__init__(port, workdir)
        self.python = find_localstack_python()
        self.extra_env = extra_env or {}
        self.filesystem_root = self.workdir / "fs"
        self._warm = False
        self._seed_kinesis_engine(find_kinesis_local_package())
        if init_dir is not None:
            self._copy_init_scripts(Path(init_dir))

    # --- setup ------------------------------------------------------------------
    def _seed_kinesis_engine(self, package: Path) -> None:
        target = (
            self.filesystem_root
            / "var/lib/localstack/lib/kinesis-local"
            / LOCALSTACK_KINESIS_MOCK_VERSION
        )
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists():
            target.symlink_to(package.resolve(), target_is_directory=True)

    def _copy_init_scripts(self, init_dir: Path) -> None:
        if not init_dir.is_dir():
            raise BackendUnavailableError(f"LocalStack init folder {init_dir} does not exist")
        for stage in INIT_STAGES:
            src = init_dir / stage
            if not src.is_dir():
                continue
            dst = self.filesystem_root / "etc/localstack/init" / stage
            dst.mkdir(parents=True, exist_ok=True)
            for script in sorted(src.iterdir()):
                if script.suffix in (".sh", ".py") and script.is_file():
                    shutil.copy2(script, dst / script.name)

    # --- ManagedProcess ----------------------------------------------------------
    def command(self) -> Sequence[str]:
        return [str(self.python), "-m", "localstack.runtime.main"]

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        for key in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"):
            env.pop(key, None)
        env.update(HOST_MODE_ENV)
        env.update(
            {
                "GATEWAY_LISTEN": f"{LOOPBACK}:{self.port}",
                "FILESYSTEM_ROOT": str(self.filesystem_root),
                # init scripts find boto3 and LocalStack's python first
                "PATH": f"{self.python.parent}{os.pathsep}{env.get('PATH', '')}",
                "AWS_ACCESS_KEY_ID": env.get("AWS_ACCESS_KEY_ID", "test"),
                "AWS_SECRET_ACCESS_KEY": env.get("AWS_SECRET_ACCESS_KEY", "test"),
                "AWS_DEFAULT_REGION": env.get("AWS_DEFAULT_REGION", "us-east-1"),
            }
        )
        env.update(self.extra_env)
        return env

    def _get_json(self, path: str) -> dict[str, object] | None:
        try:
            with urllib.request.urlopen(f"{self.endpoint_url}{path}", timeout=2) as resp:
                body = json.loads(resp.read().decode("utf-8"))
        except (OSError, ValueError, urllib.error.URLError):
            return None
        return body if isinstance(body, dict) else None

    def ready(self) -> bool:
        """Kinesis available, init scripts of the READY stage done, and the
        engine started (LocalStack starts kinesis-mock on the first call)."""
        health = self._get_json("/_localstack/health")
        services = health.get("services") if health else None
        if not isinstance(services, dict) or services.get("kinesis") not in (
            "available",
            "running",
        ):
            return False
        init = self._get_json("/_localstack/init")
        completed = init.get("completed") if init else None
        if not isinstance(completed, dict) or completed.get("READY") is not True:
            return False
        if not self._warm:
            from kinesis_spout.kinesis.client import make_client

            client = make_client(self.endpoint_url, read_timeout=60)
            try:
                client.list_streams(Limit=1)
            except Exception:
                return False
            self._warm = True
        return True

    def init_scripts(self) -> list[dict[str, object]]:
        """LocalStack's report on its init scripts (stage, name, state)."""
        init = self._get_json("/_localstack/init") or {}
        scripts = init.get("scripts")
        return [s for s in scripts if isinstance(s, dict)] if isinstance(scripts, list) else []

    def stop(self, kill: bool = False) -> None:
        """Stop LocalStack and the kinesis-mock it started.

        SIGTERM, then SIGKILL after :attr:`stop_timeout` (LocalStack's own
        shutdown sometimes hangs after stopping its Kinesis backend). kinesis-mock
        runs in a process group of its own, so every descendant seen before the
        stop is killed afterwards if still alive.
        """
        proc, self.proc = self.proc, None
        self._warm = False
        if proc is None or proc.poll() is not None:
            return
        children = descendants(proc.pid)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL if kill else signal.SIGTERM)
        try:
            proc.wait(self.stop_timeout)
        except subprocess.TimeoutExpired:
            log.info("LocalStack did not stop in %.0fs after SIGTERM: SIGKILL", self.stop_timeout)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        for pid in children:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (Linux ``/proc``)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may contain spaces and parentheses
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 1:
            parents.setdefault(int(fields[1]), []).append(int(entry.name))
    out: list[int] = []
    todo = [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out
