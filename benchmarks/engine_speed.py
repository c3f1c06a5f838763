"""How fast the NumPy engine runs on this machine, against the machine's own roofline.

Measures, in one run: float32 matmul throughput (GFLOP/s) and memory bandwidth (GB/s), then for
the default model (`ModelConfig()`) the prefill time of one prompt (128 to 2048 tokens) and the
batched decode step time (batch 1 to 64, contexts 128 to 1024) on paged KV (the `NumpyExecutor`
path) and on a contiguous per-slot KV cache with the same attention kernel. Each time is printed
with its roofline bound, max(FLOPs / GFLOP/s, bytes / bandwidth), and the ratio time / bound.

    python benchmarks/engine_speed.py [--quick] [--repeats N]

On a machine shared with other work, `OPENBLAS_NUM_THREADS=1` gives steadier figures: a BLAS
thread that waits for a busy core can make a 32-row matmul 50x slower.

Decode contexts are filled with constant keys and values (their values do not change the work);
block tables come from a shuffled free list, as in a cache that has been in use for a while.
Before timing, paged and contiguous decoding are checked to give the same logits on random KV.
"""

from __future__ import annotations

import argparse
import os
import time


import numpy as np

from engine.block_manager import BlockManager
from engine.executor import NumpyExecutor
from engine.model import (ModelConfig, attention_input, attention_output, embed, final_logits,
                          init_params)
from engine.model_runner import decode_attention
from engine.sampling import sample_token
from engine.sequence import GREEDY, Sequence
from engine.step_plan import StepPlan
from sim.cli.flag_types import positive_integer

BLOCK_SIZE = 16


def median_time_s(fn, repeats: int, best: bool = False) -> float:
    """Median (or best) time of `repeats` runs after one warm-up run (page faults, BLAS threads)."""
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.min(times) if best else np.median(times))


def paired_times_s(fn_a, fn_b, repeats: int) -> tuple[float, float]:
    """Median times of two functions run in alternation, so that load from other work on the
    machine falls on both alike."""
    fn_a(), fn_b()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn_a()
        t1 = time.perf_counter()
        fn_b()
        times.append((t1 - t0, time.perf_counter() - t1))
    a, b = np.median(np.array(times), axis=0)
    return float(a), float(b)


def machine_figures(cfg: ModelConfig, repeats: int) -> tuple[float, float]:
    """(GFLOP/s of an sgemm shaped like the model's MLP, GB/s of large copies and sums): the best
    of the runs, since a roofline is what the machine can do."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1024, cfg.d_model), dtype=np.float32)
    w = rng.standard_normal((cfg.d_model, cfg.d_ff or 4 * cfg.d_model), dtype=np.float32)
    flops = 2 * x.shape[0] * w.shape[0] * w.shape[1]
    gflops = flops / median_time_s(lambda: x @ w, repeats, best=True) / 1e9
    a = np.ones(64 << 20, np.float32)  # 256 MiB, far beyond the last-level cache
    b = np.empty_like(a)
    copy_gbs = 2 * a.nbytes / median_time_s(lambda: np.copyto(b, a), repeats, best=True) / 1e9
    sum_gbs = a.nbytes / median_time_s(lambda: a.sum(), repeats, best=True) / 1e9
    print(f"machine: sgemm {gflops:.1f} GFLOP/s ({x.shape[0]}x{w.shape[0]} @ "
          f"{w.shape[0]}x{w.shape[1]}), copy {copy_gbs:.1f} GB/s, sum {sum_gbs:.1f} GB/s")
    return gflops, max(copy_gbs, sum_gbs)


def linear_flops_per_token(cfg: ModelConfig) -> int:
    d, f = cfg.d_model, cfg.d_ff
    return 2 * cfg.n_layers * (4 * d * d + 2 * d * f)


def weight_bytes(params: dict) -> int:
    layers = sum(a.nbytes for layer in params["layers"] for a in layer.values())
    return layers + params["W_out"].nbytes


def bound_s(flops: float, nbytes: float, gflops: float, gbs: float) -> float:
    return max(flops / (gflops * 1e9), nbytes / (gbs * 1e9))


def make_sequence(cfg, rng, n_tokens, computed) -> Sequence:
    ids = [int(t) for t in rng.integers(0, cfg.vocab_size, n_tokens)]
    seq = Sequence("bench", n_tokens, 1, prompt_token_ids=ids)
    seq.num_computed_tokens = computed
    return seq


def shuffled_manager(num_blocks: int, rng) -> BlockManager:
    """A block manager whose free list hands blocks out in random order."""
    bm = BlockManager(num_blocks, BLOCK_SIZE)
    held = [bm.allocate_block(-1) for _ in range(num_blocks)]
    for block in rng.permutation(held):
        bm.free_block(int(block), seq_id=-1)
    return bm


def bench_prefill(cfg, params, gflops, gbs, lengths, repeats):
    print("\nprefill (one prompt, NumpyExecutor)")
    print(f"{'tokens':>7} {'time_ms':>9} {'bound_ms':>9} {'ratio':>6}")
    rng = np.random.default_rng(1)
    for n in lengths:
        bm = shuffled_manager(-(-n // BLOCK_SIZE), rng)
        executor = NumpyExecutor(params, bm, rng=rng)
        seq = make_sequence(cfg, rng, n, 0)
        bm.ensure_capacity(seq.seq_id, n)
        runs = min(repeats, 3) if n >= 1024 else repeats  # long prompts take seconds each
        t = median_time_s(lambda: executor.execute(StepPlan(prefills=[(seq, n)])), runs)
        attn_flops = 4 * cfg.n_layers * cfg.d_model * n * (n + 1) / 2  # causal QK^T and PV
        flops = linear_flops_per_token(cfg) * n + attn_flops + 2 * cfg.d_model * cfg.vocab_size
        nbytes = weight_bytes(params) + 2 * cfg.n_layers * n * cfg.d_model * 4
        b = bound_s(flops, nbytes, gflops, gbs)
        print(f"{n:>7} {t * 1e3:>9.2f} {b * 1e3:>9.2f} {t / b:>6.2f}")


class ContiguousDecoder:
    """Batched decode over a contiguous cache: one [max_len] slot per sequence and layer,
    K and V [L, B, S, H, hd]; the same model maths and attention kernel as the paged path."""

    def __init__(self, params, batch, max_len):
        d, h = params["E"].shape[1], params["n_heads"]
        shape = (len(params["layers"]), batch, max_len, h, d // h)
        self.params, self.rng = params, np.random.default_rng(0)
        self.k, self.v = np.full(shape, 0.01, np.float32), np.full(shape, 0.01, np.float32)

    def step(self, token_ids: np.ndarray, positions: np.ndarray) -> list[int]:
        """One decode step: K/V of each sequence's token at `positions`, then a greedy token
        per sequence, sampled like the executor's (`sample_token`)."""
        logits = self.logits(token_ids, positions)  # [B, V]
        return [sample_token(row, GREEDY, self.rng) for row in logits]

    def logits(self, token_ids: np.ndarray, positions: np.ndarray) -> np.ndarray:
        p, rows = self.params, np.arange(len(token_ids))
        x = embed(token_ids, positions, p)  # [B, D]
        span = int(positions.max()) + 1
        for index, layer in enumerate(p["layers"]):
            q, k, v = attention_input(x, layer, p["n_heads"])  # [B, H, hd] each
            self.k[index, rows, positions], self.v[index, rows, positions] = k, v
            attn = decode_attention(q, self.k[index, :, :span], self.v[index, :, :span],
                                    positions + 1)  # [B, H, hd]
            x = attention_output(x, attn, layer)
        return final_logits(x, p)  # [B, V]


def decode_setup(cfg, params, batch, context, rng, fill=None):
    """A paged executor holding `batch` sequences of `context` tokens (all but the last computed)
    and a contiguous decoder holding the same keys and values."""
    bm = shuffled_manager(batch * -(-context // BLOCK_SIZE), rng)
    executor = NumpyExecutor(params, bm, rng=rng)
    executor.storage.k.fill(0.01), executor.storage.v.fill(0.01)
    seqs = [make_sequence(cfg, rng, context, context - 1) for _ in range(batch)]
    contiguous = ContiguousDecoder(params, batch, context)
    for b, seq in enumerate(seqs):
        bm.ensure_capacity(seq.seq_id, context)
        if fill is not None:  # random KV, the same in both caches
            table = bm.block_tables[seq.seq_id]
            slots = [table[i // BLOCK_SIZE] * BLOCK_SIZE + i % BLOCK_SIZE for i in range(context)]
            for cache, paged in ((contiguous.k, executor.storage.k_slots),
                                 (contiguous.v, executor.storage.v_slots)):
                cache[:, b] = fill.standard_normal(cache[:, b].shape, dtype=np.float32)
                paged[:, slots] = cache[:, b]
    ids = np.array([seq.prompt_token_ids[-1] for seq in seqs])
    return executor, seqs, contiguous, ids, np.full(batch, context - 1)


def check_paged_equals_contiguous(cfg, params):
    rng = np.random.default_rng(2)
    executor, seqs, contiguous, ids, positions = decode_setup(cfg, params, 4, 100, rng, fill=rng)
    paged = executor.execute(StepPlan(decodes=seqs), return_logits=True).logits
    paged_rows = np.stack([paged[s.seq_id] for s in seqs])  # [B, V]
    err = np.abs(paged_rows - contiguous.logits(ids, positions)).max()
    assert err < 1e-3, f"paged and contiguous decode differ by {err}"
    print(f"check: paged == contiguous decode logits (max abs diff {err:.1e})")


def bench_decode(cfg, params, gflops, gbs, batches, contexts, repeats):
    print("\nbatched decode step (paged: NumpyExecutor; contiguous: per-slot cache)")
    print(f"{'batch':>5} {'context':>7} {'paged_ms':>9} {'contig_ms':>9} {'bound_ms':>9} "
          f"{'paged/bound':>11} {'contig/bound':>12} {'paged/contig':>12}")
    rng = np.random.default_rng(3)
    results = {}
    for context in contexts:
        for batch in batches:
            executor, seqs, contiguous, ids, positions = decode_setup(cfg, params, batch,
                                                                      context, rng)
            plan = StepPlan(decodes=seqs)
            t_paged, t_contig = paired_times_s(lambda: executor.execute(plan),
                                               lambda: contiguous.step(ids, positions), repeats)
            flops = batch * (linear_flops_per_token(cfg) + 2 * cfg.d_model * cfg.vocab_size
                             + 4 * cfg.n_layers * context * cfg.d_model)
            kv_bytes = 2 * cfg.n_layers * batch * context * cfg.d_model * 4
            b = bound_s(flops, weight_bytes(params) + kv_bytes, gflops, gbs)
            results[batch, context] = (t_paged, t_contig, b)
            print(f"{batch:>5} {context:>7} {t_paged * 1e3:>9.2f} {t_contig * 1e3:>9.2f} "
                  f"{b * 1e3:>9.2f} {t_paged / b:>11.2f} {t_contig / b:>12.2f} "
                  f"{t_paged / t_contig:>12.2f}")
            del executor, contiguous
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smaller grid (~30 s)")
    parser.add_argument("--repeats", type=positive_integer, default=5,
                        help="timed runs per shape (median)")
    args = parser.parse_args(argv)
    cfg = ModelConfig()
    params = init_params(cfg)
    print(f"model: {cfg} ({cfg.num_parameters / 1e6:.1f} M parameters); "
          f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}")
    gflops, gbs = machine_figures(cfg, args.repeats)
    check_paged_equals_contiguous(cfg, params)
    prefill = (128, 512, 2048) if args.quick else (128, 256, 512, 1024, 2048)
    batches = (1, 8, 32) if args.quick else (1, 4, 16, 32, 64)
    contexts = (128, 512) if args.quick else (128, 512, 1024)
    bench_prefill(cfg, params, gflops, gbs, prefill, args.repeats)
    results = bench_decode(cfg, params, gflops, gbs, batches, contexts, args.repeats)
    if (32, 512) in results:
        t_paged, t_contig, b = results[32, 512]
        print(f"\ntargets at batch 32, context 512: paged/bound {t_paged / b:.2f} (target <= 2), "
              f"paged/contiguous {t_paged / t_contig:.2f} (target <= 1.25)")


if __name__ == "__main__":
    main()
