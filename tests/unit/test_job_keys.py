"""The keys of the frame jobs and the batch-end floor they allow (pure logic, threads)."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kinesis_spout.spark.read.keys import GivenUpError, JobKeys


def test_a_key_runs_from_the_moment_it_is_taken() -> None:
    keys = JobKeys()
    first = keys.begin(batch=1)
    second = keys.begin(batch=2)
    keys.end(second)  # a later job ending first
    assert keys.floor() == first  # never past a job that may still record
    keys.end(first)
    assert keys.floor() == second + 1


def test_a_given_up_batch_no_longer_holds_the_floor() -> None:
    keys = JobKeys()
    hung = keys.begin(batch=1)
    rerun = keys.begin(batch=2)
    keys.give_up(1)
    assert keys.floor() == rerun
    keys.end(rerun)
    assert keys.floor() == rerun + 1 > hung
    ran: list[int] = []
    assert not keys.if_running(hung, lambda: ran.append(hung))  # its tips are not noted
    keys.end(hung)  # its thread returns at last: nothing changes
    assert keys.floor() == rerun + 1 and ran == []
    with pytest.raises(GivenUpError, match="micro-batch 1 was given up"):
        keys.begin(batch=1)  # its thread starts no new Spark job
    assert keys.floor() == rerun + 1


@given(st.lists(st.tuples(st.sampled_from(["begin", "end", "give_up"]), st.integers(0, 4))))
def test_the_floor_never_goes_down_nor_past_a_running_key(steps: list[tuple[str, int]]) -> None:
    keys = JobKeys()
    running: dict[int, int] = {}  # the model: key -> batch
    given_up: set[int] = set()
    last = keys.floor()
    for op, n in steps:
        if op == "begin" and n in given_up:
            with pytest.raises(GivenUpError):
                keys.begin(n)
        elif op == "begin":
            running[keys.begin(n)] = n
        elif op == "end" and running:
            key = sorted(running)[n % len(running)]
            keys.end(key)
            del running[key]
        elif op == "give_up":
            keys.give_up(n)
            given_up.add(n)
            running = {k: b for k, b in running.items() if b != n}
        floor = keys.floor()
        assert floor >= last
        assert all(floor <= k for k in running)
        last = floor


def test_threads_taking_and_ending_keys_never_see_the_stored_floor_pass_their_key() -> None:
    """Jobs on many threads, each raising a stored floor when it ends (as the batch-end
    store's only goes up): a key just taken is never below it, so no job starts below
    a floor another thread already stored."""
    keys = JobKeys()
    stored = [0]
    lock = threading.Lock()
    errors: list[str] = []

    def jobs(batch: int) -> None:
        for _ in range(2000):
            key = keys.begin(batch)
            if key < stored[0]:
                errors.append(f"key {key} taken below the stored floor {stored[0]}")
            keys.end(key)
            with lock:
                stored[0] = max(stored[0], keys.floor())

    threads = [threading.Thread(target=jobs, args=(b,)) for b in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert keys.floor() == 4 * 2000 + 1
