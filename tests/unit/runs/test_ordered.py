"""The reorder buffer of a score run's examples in flight (``ctxlite.runs.ordered.InOrder``)
against the trivially right reference, a loop in input order."""

from __future__ import annotations

import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxlite.errors import InvalidParameter
from ctxlite.runs.ordered import InOrder


class Failed(Exception):
    pass


def reference(items):
    """What a loop in input order yields, and the exception it ends with (None: none)."""
    out = []
    for i, (_, fails) in enumerate(items):
        if fails:
            return out, i
        out.append(i * i)
    return out, None


@settings(max_examples=60, deadline=None)
@given(
    items=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 9).map(lambda k: k == 0)), max_size=14),
    workers=st.integers(1, 5),
    extra=st.integers(0, 4),
)
def test_the_results_are_those_of_a_loop_in_input_order(items, workers, extra):
    window = workers + extra
    lock = threading.Lock()
    running, most, starts = [0], [0], []

    def fn(i, x):
        millis, fails = x
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
            starts.append((i, runner.head))
        try:
            time.sleep(millis / 1000)
            if fails:
                raise Failed(i)
            return i * i
        finally:
            with lock:
                running[0] -= 1

    expected, failure = reference(items)
    got = []
    with InOrder(fn, items, workers, window) as runner:
        if failure is None:
            got = list(runner)
        else:
            with pytest.raises(Failed) as raised:
                for r in runner:
                    got.append(r)
            assert raised.value.args == (failure,)  # the first failure in input order, not in time
    assert got == expected
    assert most[0] <= workers
    assert all(i < head + window for i, head in starts)  # started and not yet yielded: at most window
    if failure is not None:
        assert all(i < failure + window for i, _ in starts)  # nothing far beyond the failure ran


def test_a_consumer_that_stops_early_cancels_what_has_not_started():
    started = []
    gate = threading.Event()

    def fn(i, x):
        started.append(i)
        gate.wait(5)
        return x

    with InOrder(fn, range(20), workers=2, window=4) as runner:
        it = iter(runner)
        gate.set()
        assert next(it) == 0
    time.sleep(0.05)
    assert runner.closed and max(started) < 1 + 4  # only the window was ever queued


def test_the_window_holds_the_workers():
    with pytest.raises(InvalidParameter):
        InOrder(lambda i, x: x, [1], workers=3, window=2)


def test_a_later_failure_waits_for_every_result_before_it():
    """Item 2 fails while item 0 is still running: 0 and 1 are yielded first, then 2's exception."""
    failed = threading.Event()

    def fn(i, x):
        if i == 0:
            failed.wait(5)
            time.sleep(0.05)  # item 2's failure is in its future by now
        if i == 2:
            try:
                raise Failed(2)
            finally:
                failed.set()
        return i

    got = []
    with pytest.raises(Failed), InOrder(fn, range(6), workers=3, window=3) as runner:
        for r in runner:
            got.append(r)
    assert got == [0, 1]
