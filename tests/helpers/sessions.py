"""Multi-turn chat sessions for the tests: a small simulated config of them, and a run built
from `run_config`'s pieces with the executor a test gives."""

from engine.records import RunRecorder
from sim.loop import run_loop
from sim.build import build_scheduler, sequence_factory
from sim.workloads import build_workload, seeded_streams

TINY = {"vocab_size": 128, "d_model": 32, "n_layers": 2, "n_heads": 2, "d_ff": 64,
        "max_seq_len": 512}
SESSIONS = {"conversations": 6, "turns": {"dist": "uniform", "low": 2, "high": 4},
            "system_prompt_tokens": 18, "think_time_s": 0.05}
CONFIG = {
    "name": "sessions", "description": "", "seed": 5, "mode": "simulate", "model": TINY,
    "engine": {"block_size": 4, "num_kv_blocks": 120, "max_num_seqs": 8,
               "max_num_batched_tokens": 48, "enable_prefix_caching": True},
    "scheduler": {"policy": "continuous", "queue": "fcfs", "chunked_prefill": True,
                  "max_batch_size": 8, "batch_timeout_s": 0.0},
    "cost": {"model": "linear", "profile": "default", "step_overhead_s": 1e-3,
             "prefill_token_s": 1e-4, "decode_seq_s": 1e-4, "context_token_s": 1e-7},
    "workload": {"arrival": {"process": "poisson", "rate": 40.0},
                 "prompt_tokens": {"dist": "uniform", "low": 2, "high": 20},
                 "output_tokens": {"dist": "uniform", "low": 1, "high": 12},
                 "sessions": SESSIONS},
    "slo": {"ttft_s": 1.0, "tpot_s": 0.1},
}


def run_pieces(cfg, executor_for, real: bool):
    """(records, block manager) of a run of `cfg` (a RunConfig) built from run_config's pieces
    with the executor
    `executor_for(block_manager)`; real: prompts of token ids, else block keys."""
    model = cfg.model
    scheduler = build_scheduler(cfg, model.max_seq_len)
    bm = scheduler.block_manager
    streams = seeded_streams(cfg.seed)
    workload = build_workload(cfg.workload, streams["workload"])
    make = sequence_factory(workload, streams["tokens"], model.vocab_size) if real else \
        sequence_factory(workload, block_size=bm.block_size)
    recorder = run_loop(scheduler, executor_for(bm), RunRecorder(bm.num_blocks), make,
                        arrival_s=workload.arrival_s, closed_loop=workload.closed_loop,
                        sessions=workload.sessions, num_requests=len(workload))
    return recorder, bm
