"""Work done concurrently, its results taken in input order: the reorder buffer of a score run
whose examples are in flight together on a server.

:class:`InOrder` runs ``fn(i, item)`` on ``workers`` threads and yields the results in the order of
the items, so whatever consumes them (a log appending each record as it comes) sees exactly the
sequence a one-by-one loop gives: result 0, 1, 2, ...; the first item, *in input order*, whose call
raised ends the iteration with its exception, after every result before it was yielded and none
after it. At most ``window`` items are started and not yet yielded (the buffer's bound: a slow
item holds back at most ``window - 1`` finished ones), and an item is started only once every
item before it was. The threads are daemons: a Ctrl-C in the consuming thread ends the iteration
at once (what has not started never starts; :attr:`InOrder.closed` tells what is running that
it is no longer wanted).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future

from ctxlite.errors import InvalidParameter


class InOrder:
    """``fn(i, items[i])`` for each item on ``workers`` threads, yielded in input order (see the
    module docstring); use it as a context manager so that leaving early stops what is queued.

    >>> with InOrder(lambda i, x: x * x, [1, 2, 3], workers=2, window=2) as squares:
    ...     list(squares)
    [1, 4, 9]
    """

    def __init__(self, fn: Callable[[int, object], object], items: Sequence, workers: int, window: int):
        if workers < 1 or window < workers:
            raise InvalidParameter(f"need workers >= 1 and window >= workers, got {workers} and {window}")
        self.fn, self.items = fn, list(items)
        self.workers, self.window = workers, window
        self.head = 0  # the item whose result is awaited (all before it were yielded)
        self.closed = False
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._futures: list[Future] = []
        self._threads = 0

    def __iter__(self) -> Iterator:
        try:
            for k in range(len(self.items)):
                self.head = k
                self._start_up_to(min(len(self.items), k + self.window))
                yield self._futures[k].result()  # fn's exception, raised here in input order
        finally:
            self.close()

    def _start_up_to(self, n: int) -> None:
        while len(self._futures) < n:
            future: Future = Future()
            self._jobs.put((future, len(self._futures)))
            self._futures.append(future)
            if self._threads < self.workers:
                threading.Thread(target=self._work, name=f"ctxlite-item-{self._threads}", daemon=True).start()
                self._threads += 1

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            future, i = job
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(self.fn(i, self.items[i]))
                except BaseException as exc:  # handed to the consumer, who raises it in its turn
                    future.set_exception(exc)

    def close(self) -> None:
        """Cancel what has not started and let the threads end (what runs ends in its own time)."""
        if self.closed:
            return
        self.closed = True
        for future in self._futures:
            future.cancel()
        for _ in range(self._threads):
            self._jobs.put(None)

    def __enter__(self) -> InOrder:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
