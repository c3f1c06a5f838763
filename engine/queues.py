"""Waiting queues: first-come-first-served and priority (lower value first).

Both offer the same small interface (`push`, `push_front`, `peek`, `pop`, `remove`, `in`, `len`,
iteration) so the scheduler never asks which one it has. Priority ties break by arrival time,
then by the sequence's id (the order requests were made, as vLLM breaks them by request id), so
a preempted request pushed back keeps its place among requests of its priority and arrival
time; a counter behind those keeps two requests from ever being compared with each other.

`priority_queue_push` / `priority_queue_pop` are the part 6 functions over a plain heap list;
`PriorityQueue` is the same heap behind the queue interface (and can wrap a caller's list).
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque

_tiebreak = itertools.count()  # shared by every heap: only the order of its values matters


def priority_queue_push(heap: list, priority, request, arrival_s: float = 0.0,
                        order: int | None = None) -> None:
    """Push `request` onto a heap list: lower `priority` first, then earlier `arrival_s`, then
    lower `order` (default: the request's `seq_id`, as `PriorityQueue` orders a sequence; 0
    for a request without one), then first pushed first."""
    if order is None:
        order = getattr(request, "seq_id", 0)
    heapq.heappush(heap, (priority, arrival_s, order, next(_tiebreak), request))


def priority_queue_pop(heap: list):
    """Pop the most urgent request, or None when the heap is empty."""
    return heapq.heappop(heap)[-1] if heap else None


class FcfsQueue:
    """Arrival order; a preempted sequence goes back to the front."""

    def __init__(self):
        self._items = deque()

    def push(self, seq) -> None:
        self._items.append(seq)

    def push_front(self, seq) -> None:
        self._items.appendleft(seq)

    def peek(self):
        return self._items[0]

    def pop(self):
        return self._items.popleft()

    def remove(self, seq) -> None:
        self._items.remove(seq)

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self):
        return iter(self._items)

    def head(self, k: int):
        """The first `k` in queue order (or all, when fewer wait)."""
        return itertools.islice(self._items, k)


class PriorityQueue:
    """Lower priority value first; a preempted sequence keeps its original priority, arrival and
    id, so it goes back ahead of everything of its priority that arrived after it, or at the
    same time and was made after it. `heap`: a list filled by `priority_queue_push` to share
    (default: a new one)."""

    def __init__(self, heap: list | None = None):
        self._heap: list = [] if heap is None else heap

    def push(self, seq) -> None:
        priority_queue_push(self._heap, seq.priority, seq, seq.arrival_s)  # ties: seq_id

    push_front = push

    def peek(self):
        return self._heap[0][-1]

    def pop(self):
        return heapq.heappop(self._heap)[-1]

    def remove(self, seq) -> None:
        self._heap[:] = [entry for entry in self._heap if entry[-1] is not seq]
        heapq.heapify(self._heap)

    def __contains__(self, seq) -> bool:
        return any(entry[-1] is seq for entry in self._heap)  # without sorting, as `in` would

    def __len__(self) -> int:
        return len(self._heap)

    def __iter__(self):
        """Queue order (sorts a copy: for reports and tests, not for the step loop)."""
        return (entry[-1] for entry in sorted(self._heap, key=lambda e: e[:4]))

    def head(self, k: int):
        """The first `k` in queue order (or all, when fewer wait), lazily: each one taken costs
        a pop from a copy of the heap."""
        heap = list(self._heap)
        for _ in range(min(k, len(heap))):
            yield heapq.heappop(heap)[-1]


QUEUES = {"fcfs": FcfsQueue, "priority": PriorityQueue}
