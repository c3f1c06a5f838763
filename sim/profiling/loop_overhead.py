"""The engine loop's own cost: what a served step takes beyond the executor's forward pass and
sampling, i.e. `Scheduler.schedule`, `Scheduler.postprocess`, the recorder and the server loop
between two steps.

A server starts its next step the moment one ends, so the simulator's clock must advance, per
step, by the time from one step's start to the next one's, not by the executor's time alone.
`measure_loop_overhead` serves a burst of requests through `engine.server.serve` (the real loop,
on the wall clock), keeps each step's executor time, and fits

    start of next step - start of step - executor time = step + decode_seqs * d + prefill_seqs * p

by non-negative least squares (one pass without the steps the machine's other work disturbed
most). The requests all arrive at once, more than `max_num_seqs` of them, so the engine is never
idle: decode batches of every size up to `max_num_seqs`, new prompts joining as others finish.
"""

from __future__ import annotations

import numpy as np

from engine.records import RunRecorder
from engine.scheduler import Scheduler, SchedulerConfig
from engine.sequence import SamplingParams, Sequence

from ..costs.fitting import nnls

LOOP_FEATURES = ("step", "decode_seqs", "prefill_seqs")
REQUESTS, MAX_NUM_SEQS, RUNS = 96, 24, 2
SAMPLING = SamplingParams(temperature=1.0)


class TimedExecutor:
    """Executor protocol around a real executor: keeps (decodes, prefill chunks, executor
    seconds) of every step, nothing that costs more than O(1) a step."""

    def __init__(self, executor):
        self.executor = executor
        self.steps: list[tuple[int, int, float]] = []

    def execute(self, plan):
        result = self.executor.execute(plan)
        self.steps.append((len(plan.decodes), len(plan.prefills), result.duration_s))
        return result


def burst_requests(rng: np.random.Generator, vocab_size: int, max_seq_len: int) -> list:
    """REQUESTS requests arriving at time 0: prompts of 8-128 tokens, 2-64 output tokens."""
    requests = []
    for i in range(REQUESTS):
        prompt = int(rng.integers(8, min(129, max_seq_len // 2)))
        output = int(rng.integers(2, min(65, max_seq_len - prompt)))
        ids = rng.integers(0, vocab_size, size=prompt).tolist()
        requests.append(Sequence(f"loop-{i}", prompt, output, prompt_token_ids=ids,
                                 arrival_s=0.0, sampling=SAMPLING, ignore_eos=True, seq_id=i))
    return requests


def serve_burst(executor, rng: np.random.Generator, vocab_size: int, max_seq_len: int):
    """Serve one burst on `executor` (its block manager must be empty); returns per step
    (features [S, 3] in LOOP_FEATURES order, overhead seconds [S])."""
    from engine.server import serve

    block_manager = executor.block_manager
    scheduler = Scheduler(SchedulerConfig(max_num_seqs=MAX_NUM_SEQS, max_num_batched_tokens=512,
                                          max_seq_len=max_seq_len), block_manager)
    timed, recorder = TimedExecutor(executor), RunRecorder(block_manager.num_blocks)
    serve(scheduler, timed, burst_requests(rng, vocab_size, max_seq_len), recorder)
    start = np.asarray(recorder.step_columns()["start_s"])  # [S + 1]
    steps = np.array(timed.steps[:-1], dtype=float)  # [S, 3]: the last step has no successor
    overhead = np.diff(start) - steps[:, 2]  # [S]
    features = np.column_stack([np.ones(len(steps)), steps[:, 0], steps[:, 1]])  # [S, 3]
    return features, overhead


def measure_loop_overhead(executor, rng: np.random.Generator, vocab_size: int,
                          max_seq_len: int) -> tuple[dict, dict]:
    """({feature: seconds} over LOOP_FEATURES, {"steps", "median_abs_error_s"}): the loop's
    cost per step, per decoding sequence and per prefill chunk."""
    runs = [serve_burst(executor, rng, vocab_size, max_seq_len) for _ in range(RUNS)]
    x = np.concatenate([f for f, _ in runs])  # [S, 3]
    y = np.concatenate([o for _, o in runs])  # [S]
    coefficients = nnls(x, y)
    residual = np.abs(x @ coefficients - y)  # [S]
    keep = residual <= np.percentile(residual, 95)  # drop the steps other work disturbed most
    coefficients = nnls(x[keep], y[keep])
    error = float(np.median(np.abs(x @ coefficients - y)))
    return (dict(zip(LOOP_FEATURES, coefficients.tolist())),
            {"steps": int(len(y)), "median_abs_error_s": error})
