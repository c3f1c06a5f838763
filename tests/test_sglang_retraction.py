"""SGLang's taking back under its capacity policy (`capacity_scheduler_policy =
"new_token_ratio"`, `ContinuousSteps._retract`): where a step's decodes do not all find their
next KV block, the decoding request with the fewest outputs goes first (then the longest prompt,
then the last in running order, whatever the queue), to the end of the queue, until they do,
leaving at least one. Each case is one step set up where SGLang's choice and vLLM's (the last of
the running list, back to the head of the queue) differ. The ratio it sets and runs under
pressure: tests/test_new_token_ratio.py."""

from __future__ import annotations

from engine.kv_reservation import admit_sequence
from engine.sequence import Sequence
from helpers.runs import scheduler

SGLANG = "new_token_ratio"


def planned(policy: str, blocks: int, members, **config) -> tuple[list, list, list]:
    """One step of a scheduler whose running list holds `members` (name, prompt tokens,
    outputs emitted: decoding; or name, prompt tokens, None, tokens computed: prefilling) in
    blocks of 4, a request waiting: (taken back, decoding, waiting) request ids."""
    s = scheduler(policy, blocks=blocks, **config)
    for i, (name, prompt, emitted, *computed) in enumerate(members):
        seq = Sequence(name, prompt, 20, seq_id=i, priority=i)
        n = computed[0] if computed else prompt + emitted - 1
        admit_sequence(seq, s.block_manager, n)
        seq.num_output_tokens, seq.num_computed_tokens = emitted or 0, n
        s.running.append(seq)
    s.add(Sequence("new", 4, 20, seq_id=99, priority=9))
    plan = s.schedule()
    return ([seq.request_id for seq in plan.preempted],
            [seq.request_id for seq in plan.decodes], [seq.request_id for seq in s.waiting])


def test_a_step_short_of_blocks_takes_back_the_request_with_the_fewest_outputs():
    """6 blocks of 4; x and v (4 prompt tokens, 5 outputs, v readmitted last) hold 2 each and y
    (1 output) 1; each needs one more, and one is free. SGLang takes back y, the fewest
    outputs, and queues it behind the request waiting; vLLM's way takes back the last, v, and
    queues it first."""
    readmitted = [("x", 4, 5), ("y", 4, 1), ("v", 4, 5)]
    assert planned(SGLANG, 6, readmitted) == (["y"], ["x", "v"], ["new", "y"])
    assert planned("max_utilization", 6, readmitted) == (["v"], ["x", "y"], ["v", "new"])


def test_of_those_with_the_fewest_outputs_the_longest_prompt_then_the_last_goes():
    """Each of three needs a block and 2 are free: of z (8 prompt tokens) and y (4), with 1
    output each, z goes (7 blocks); of y and y2, alike, the last in running order (6 blocks)."""
    assert planned(SGLANG, 7, [("x", 4, 5), ("z", 8, 1), ("y", 4, 1)])[0] == ["z"]
    assert planned("max_utilization", 7, [("x", 4, 5), ("z", 8, 1), ("y", 4, 1)])[0] == ["y"]
    assert planned(SGLANG, 6, [("x", 4, 5), ("y", 4, 1), ("y2", 4, 1)])[0] == ["y2"]


def test_only_the_blocks_the_step_needs_are_counted():
    """6 blocks, 1 free: a and c (5 outputs) need a block each, b (2 outputs, its row inside
    its block) none: b goes all the same, having the fewest outputs, and a and c decode."""
    assert planned(SGLANG, 6, [("a", 4, 5), ("b", 4, 2), ("c", 4, 5)])[:2] == \
        (["b"], ["a", "c"])


def test_the_last_decoding_request_stays_and_preempts_a_prefill_behind_it():
    """2 blocks of 4: d (1 output) needs its second, p (a 12-token prompt, 4 computed) holds
    the other. d is not taken back, being the only one decoding; it preempts p, as vLLM's way
    does."""
    assert planned(SGLANG, 2, [("d", 4, 1), ("p", 12, None, 4)])[:2] == (["p"], ["d"])


def test_with_the_priority_queue_the_fewest_outputs_still_go_first():
    """SGLang's default retraction order ignores priority: u (priority 0, 1 output) goes before
    w (priority 1, 5 outputs), where vLLM's way takes the last in priority order, w."""
    members = [("u", 4, 1), ("w", 4, 5)]
    assert planned(SGLANG, 4, members, queue="priority")[0] == ["u"]
    assert planned("max_utilization", 4, members, queue="priority")[0] == ["w"]
