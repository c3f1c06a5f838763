"""The synthetic workloads the profiler serves: designed to cover the step shapes a server runs,
never the scenarios a validation compares against.

Each is a resolved config (the profiled model, an engine and scheduler setting, a workload)
served in real time through the real serving loop (`serving.serve_logged`). Together they give
decode batches from 1 to 96 sequences, contexts from a few tokens to 2,096, prefills of every
size alone and beside decodes, chunked prefill, static batching's padding rows, recompute after
preemption, and idle gaps between requests. `TRAIN` is what the cost model is fitted on;
`HELD_OUT` (other seeds and mixtures) measures its error on steps it never saw.

A quick profile serves each workload with a sixth of its requests, arriving twice as fast.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from scenarios import DEFAULTS, RunConfig


@dataclass(frozen=True)
class ProfilingWorkload:
    name: str
    engine: dict  # engine keys that differ from the defaults
    scheduler: dict  # scheduler keys that differ from the defaults
    workload: dict  # a resolved workload table (num_requests, arrival, lengths)
    seed: int

    def config(self, model: dict, quick: bool = False) -> RunConfig:
        """The resolved config that serves this workload on `model` ({ModelConfig fields})."""
        config = copy.deepcopy({key: DEFAULTS[key] for key in
                                ("engine", "scheduler", "cost", "slo")})
        config["engine"] |= self.engine
        config["scheduler"] |= self.scheduler
        workload = copy.deepcopy(self.workload)
        if quick:  # fewer requests, arriving twice as fast
            workload["num_requests"] = max(workload["num_requests"] // QUICK_SHARE, 4)
            workload["arrival"]["rate"] *= 2
        longest = workload["prompt_tokens"].get("high", workload["prompt_tokens"].get("max"))
        longest += workload["output_tokens"]["high"]
        if longest > model["max_seq_len"]:
            raise ValueError(f"profiling workload {self.name}: requests of up to {longest} "
                             f"tokens need model.max_seq_len >= {longest}")
        model = {k: v for k, v in model.items() if k != "seed"}
        return RunConfig.from_dict(config | {
            "name": f"profile-{self.name}", "description": "", "seed": self.seed,
            "mode": "serve", "model": model, "workload": workload})


QUICK_SHARE = 6  # a quick profile serves 1/6 of each workload's requests


def _burst(n: int, prompts: dict, outputs: dict) -> dict:
    """n requests arriving within a few milliseconds of each other."""
    return {"num_requests": n, "arrival": {"process": "constant", "rate": 2000.0},
            "prompt_tokens": prompts, "output_tokens": outputs}


def _poisson(n: int, rate: float, prompts: dict, outputs: dict) -> dict:
    return {"num_requests": n, "arrival": {"process": "poisson", "rate": rate},
            "prompt_tokens": prompts, "output_tokens": outputs}


def _lognormal(median: int, high: int, sigma: float = 0.8) -> dict:
    return {"dist": "lognormal", "median": median, "sigma": sigma, "min": 2, "max": high}


def _uniform(low: int, high: int) -> dict:
    return {"dist": "uniform", "low": low, "high": high}


TRAIN = (
    # a queue that drains: decode batches of every size up to 32, new prompts joining
    ProfilingWorkload("drain", {"max_num_seqs": 32}, {},
                      _burst(64, _lognormal(96, 512), _uniform(8, 128)), 101),
    # a server mostly idle: small batches, idle gaps of every length before steps
    ProfilingWorkload("sparse", {}, {}, _poisson(36, 2.0, _lognormal(128, 1024), _uniform(8, 96)),
                      102),
    # long contexts
    ProfilingWorkload("long", {"max_num_seqs": 12, "num_kv_blocks": 1600,
                               "max_num_batched_tokens": 4096}, {},
                      _burst(10, _uniform(800, 2000), _uniform(32, 96)), 103),
    # chunks of long prompts beside decodes
    ProfilingWorkload("chunked", {"max_num_batched_tokens": 256}, {"chunked_prefill": True},
                      _poisson(40, 4.0, _uniform(200, 1200), _uniform(16, 64)), 104),
    # static batches: prompts prefilled together, padding rows as sequences finish
    ProfilingWorkload("static", {}, {"policy": "static", "max_batch_size": 8},
                      _burst(40, _lognormal(128, 512), _uniform(8, 96)), 105),
    # a small cache: preemption and recompute
    ProfilingWorkload("preempt", {"num_kv_blocks": 80, "max_num_seqs": 16}, {},
                      _burst(24, _uniform(64, 320), _uniform(64, 160)), 106),
    # wide decode batches
    ProfilingWorkload("wide", {"max_num_seqs": 96, "max_num_batched_tokens": 4096}, {},
                      _burst(160, _lognormal(32, 128), _uniform(24, 48)), 107),
)

HELD_OUT = (
    ProfilingWorkload("held-mixed", {"max_num_batched_tokens": 512}, {"chunked_prefill": True},
                      _poisson(60, 4.0, _lognormal(200, 1500), _uniform(16, 128)), 201),
    ProfilingWorkload("held-drain", {"max_num_seqs": 48}, {},
                      _burst(64, _lognormal(64, 600), _uniform(8, 80)), 202),
)


def longest_request() -> int:
    """The most tokens (prompt + output) a profiling request holds: the model's max_seq_len
    must be at least this."""
    return max(w.workload["prompt_tokens"].get("high", w.workload["prompt_tokens"].get("max"))
               + w.workload["output_tokens"]["high"] for w in TRAIN + HELD_OUT)
