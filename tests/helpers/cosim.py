"""Cosimulation for the tests: a small cosimulated config, and executors that record the real
engine's step times and replay them to a simulation."""

from engine.executor import StepResult

TINY = {"vocab_size": 64, "d_model": 32, "n_layers": 2, "n_heads": 2, "d_ff": 64,
        "max_seq_len": 256}
CONFIG = {
    "name": "cosim", "description": "", "seed": 3, "mode": "cosimulate", "model": TINY,
    "engine": {"block_size": 4, "num_kv_blocks": 40, "max_num_seqs": 8,
               "max_num_batched_tokens": 32, "enable_prefix_caching": False},
    "scheduler": {"policy": "continuous", "queue": "fcfs", "chunked_prefill": True,
                  "max_batch_size": 8, "batch_timeout_s": 0.0},
    "cost": {"model": "linear", "profile": "default", "step_overhead_s": 1e-3,
             "prefill_token_s": 1e-5, "decode_seq_s": 1e-4, "context_token_s": 1e-7},
    "workload": {"num_requests": 24, "arrival": {"process": "constant", "rate": 1e9},
                 "prompt_tokens": {"dist": "uniform", "low": 2, "high": 60},
                 "output_tokens": {"dist": "uniform", "low": 1, "high": 16},
                 "priority": None, "trace": None},
    "slo": {"ttft_s": 1.0, "tpot_s": 0.1},
}


class Recording:
    def __init__(self, inner):
        self.inner, self.durations = inner, []

    def execute(self, plan):
        result = self.inner.execute(plan)
        self.durations.append(result.duration_s)
        return result


class Replay:
    def __init__(self, durations):
        self.durations = iter(durations)

    def execute(self, plan):
        return StepResult(None, next(self.durations))
