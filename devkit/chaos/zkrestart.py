"""ZooKeeper stopped and started again during a chaos run, in a thread of its own."""

from __future__ import annotations

import threading
import time
from typing import Any, Self

from devkit.chaos.plan import ChaosError


class ZooKeeperRestart:
    """Stops ZooKeeper, waits, starts it again on the same port and data, in a thread
    (the job keeps running and kills keep coming meanwhile)."""

    def __init__(self, zk: Any, down_seconds: float, origin: float) -> None:
        self.zk = zk
        self.down_seconds = down_seconds
        self.origin = origin
        self.stopped_at = 0.0
        self.unreachable = 0.0
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="chaos-zk-restart", daemon=True)

    def start(self) -> Self:
        self._thread.start()
        return self

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def join(self, timeout: float = 120.0) -> None:
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise ChaosError(f"ZooKeeper did not come back within {timeout:.0f}s")
        if self.error is not None:
            raise ChaosError(f"ZooKeeper did not restart: {self.error}") from self.error

    def _run(self) -> None:
        t = time.monotonic()
        self.stopped_at = round(t - self.origin, 1)
        try:
            self.zk.stop()
            time.sleep(self.down_seconds)
            self.zk.start()
        except BaseException as exc:  # reported by join()
            self.error = exc
        self.unreachable = round(time.monotonic() - t, 1)
