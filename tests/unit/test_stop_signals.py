"""StopSignals: the first signal asks to stop and wakes a sleep; a second interrupts."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from kinesis_spout import KinesisSpoutError, StopSignals


def test_first_signal_requests_a_stop_second_interrupts_handlers_put_back() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with StopSignals() as stop:
        assert not stop.requested
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.requested and stop.reason == "SIGTERM"
        started = time.monotonic()
        stop.sleep(30)  # a stop was requested: no sleep at all
        assert time.monotonic() - started < 1
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
    assert signal.getsignal(signal.SIGTERM) == before


def test_a_signal_wakes_a_sleep() -> None:
    with StopSignals() as stop:
        timer = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM))
        timer.start()
        started = time.monotonic()
        stop.sleep(30)
        timer.join()
    assert stop.reason == "SIGTERM" and time.monotonic() - started < 10


def test_outside_the_main_thread_is_a_clear_error() -> None:
    errors: list[BaseException] = []

    def enter() -> None:
        try:
            with StopSignals():
                pass
        except KinesisSpoutError as exc:
            errors.append(exc)

    t = threading.Thread(target=enter)
    t.start()
    t.join()
    assert errors and "main thread" in str(errors[0])
