"""The request slots and the request pool of a server backend serve the lowest rank first (then
first come), and never hold more than their slots (``ctxlite.runtime.server_transport``): what keeps
a score run's earliest example in flight, the one logged next, ahead of the later ones."""

from __future__ import annotations

import threading
import time

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxlite.runtime.server_transport import Pool, Slots, current_rank, ranked


def _wait_for(condition) -> None:
    for _ in range(2000):
        if condition():
            return
        time.sleep(0.001)
    raise AssertionError("timed out")


@settings(max_examples=30, deadline=None)
@given(ranks=st.lists(st.integers(0, 4), min_size=1, max_size=8), n=st.integers(1, 3))
def test_waiters_take_the_slots_lowest_rank_first_then_first_come(ranks, n):
    slots = Slots(n)
    held = [slots.__enter__() for _ in range(n)]  # every slot taken: the waiters queue
    order, lock = [], threading.Lock()
    inside, most = [0], [0]

    def wait(k, rank):
        with ranked(rank), slots:
            with lock:
                order.append(k)
                inside[0] += 1
                most[0] = max(most[0], inside[0])
            time.sleep(0.001)
            with lock:
                inside[0] -= 1

    threads = []
    for k, rank in enumerate(ranks):  # one by one, so that their arrival order is k
        threads.append(threading.Thread(target=wait, args=(k, rank)))
        threads[-1].start()
        _wait_for(lambda: len(slots._waiting) == k + 1)
    for s in held:
        s.__exit__(None, None, None)
    for t in threads:
        t.join(10)
    assert most[0] <= n
    expected = sorted(range(len(ranks)), key=lambda k: (ranks[k], k))
    # the first n were let in together; past them, each freed slot goes to the next in rank order
    assert sorted(order[:n]) == sorted(expected[:n]) and order[n:] == expected[n:]


def test_the_pool_runs_the_lowest_ranked_jobs_first_and_in_their_rank():
    pool = Pool(1)
    gate, order = threading.Event(), []
    try:
        pool.submit(lambda _: gate.wait(5), None)  # the one worker busy: the rest queue
        futures = []
        for k, rank in enumerate([3, 1, 2, 1, 0]):
            with ranked(rank):
                futures.append(pool.submit(lambda k: order.append((k, current_rank())), k))
        gate.set()
        for f in futures:
            f.result(5)
    finally:
        pool.shutdown()
    assert order == [(4, 0), (1, 1), (3, 1), (2, 2), (0, 3)]
