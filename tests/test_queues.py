"""Waiting queues and the part 6 priority-queue functions."""

import pytest

from engine.queues import FcfsQueue, PriorityQueue, priority_queue_pop, priority_queue_push
from engine.sequence import Sequence


def test_priority_queue_pops_lower_value_first_and_ties_first_in_first_out():
    heap = []
    for priority, request in [(2, {"id": "c"}), (0, {"id": "a1"}), (1, {"id": "b"}),
                              (0, {"id": "a2"}), (0, {"id": "a3"})]:
        priority_queue_push(heap, priority, request)  # dicts are unorderable: never compared
    assert [priority_queue_pop(heap)["id"] for _ in range(5)] == ["a1", "a2", "a3", "b", "c"]


def test_priority_queue_pop_of_an_empty_heap_is_none():
    assert priority_queue_pop([]) is None


def test_priority_ties_break_by_arrival_before_push_order():
    heap = []
    priority_queue_push(heap, 0, "late", arrival_s=2.0)
    priority_queue_push(heap, 0, "early", arrival_s=1.0)
    assert priority_queue_pop(heap) == "early"


def test_fcfs_queue_keeps_arrival_order_and_puts_preempted_in_front():
    q = FcfsQueue()
    for name in "abc":
        q.push(name)
    assert q.pop() == "a"
    q.push_front("a")
    assert list(q) == ["a", "b", "c"] and q.peek() == "a" and len(q) == 3


def test_preempted_sequence_keeps_its_priority_and_arrival():
    q = PriorityQueue()
    old = Sequence("old", 3, 1, priority=1, arrival_s=0.0)
    newer = Sequence("newer", 3, 1, priority=1, arrival_s=5.0)
    urgent = Sequence("urgent", 3, 1, priority=0, arrival_s=9.0)
    q.push(newer)
    q.push(urgent)
    q.push_front(old)  # requeued after a preemption
    assert [s.request_id for s in q] == ["urgent", "old", "newer"]
    assert [q.pop().request_id for _ in range(3)] == ["urgent", "old", "newer"]


def test_a_preempted_request_of_a_burst_keeps_its_place():
    # one arrival time, one priority (`--request-rate inf`): requests made earlier go first,
    # and one pushed back after a preemption goes back ahead of those made after it, as in vLLM
    q = PriorityQueue()
    burst = [Sequence(f"r{i}", 3, 1, arrival_s=0.0) for i in range(4)]
    for seq in burst[2:]:
        q.push(seq)
    q.push_front(burst[1])  # the later of two victims goes back first
    q.push_front(burst[0])
    assert burst[0] in q and Sequence("other", 3, 1) not in q
    assert [q.pop().request_id for _ in range(4)] == ["r0", "r1", "r2", "r3"]
    heap = []  # a heap shared with the part 6 function orders sequences alike
    priority_queue_push(heap, 0, burst[1])
    PriorityQueue(heap).push_front(burst[0])
    assert [priority_queue_pop(heap).request_id for _ in range(2)] == ["r0", "r1"]


def test_priority_queue_can_share_a_heap_filled_by_the_part_6_functions():
    heap = []
    priority_queue_push(heap, 1, "b")
    q = PriorityQueue(heap)
    priority_queue_push(heap, 0, "a")
    assert len(q) == 2 and q.peek() == "a" and q.pop() == "a" and heap[0][-1] == "b"


def test_popping_an_empty_queue_raises():
    with pytest.raises(IndexError):
        FcfsQueue().pop()
    with pytest.raises(IndexError):
        PriorityQueue().pop()
