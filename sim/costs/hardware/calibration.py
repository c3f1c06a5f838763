"""Fit the hardware cost model's efficiencies to published GPU measurements.

`fit_efficiency(rows, gpu)` fits one measured GPU's `Efficiency` to the operator times of
Llama-2-7B layers (every tensor-parallel degree, 1 to 4,096 tokens): first each elementwise
kernel's launch cost and bandwidth efficiency (linear least squares on relative error), then the
matmuls' launch cost and memory efficiency on their memory-bound rows (T <= 16), then each
knot's compute efficiency by a search that minimises the squared log error of the matmuls near
it (a hat weight in log2 T), twice over. `fit_all_reduce(rows)` fits a ring all-reduce's latency
and bus bandwidth for each number of GPUs on one node. `calibrate()` does both from the shipped
measurements (`data/measured/`) and returns what `data/calibration.json` holds; the simulator
reads that file and never refits.
"""

from __future__ import annotations

import csv
import gzip
import io
from pathlib import Path

import numpy as np

from .architecture import Architecture
from .operators import MATMULS, elementwise_bytes, embedding_bytes, matmul_counts
from .timing import AllReduce, Efficiency

MEASURED = Path(__file__).resolve().parent / "data" / "measured"
# The measured model: Llama-2-7B as the measurements ran it (vocabulary padded to 32,768).
LLAMA2_7B = Architecture(n_layers=32, d_model=4096, n_heads=32, n_kv_heads=32, d_ff=11008,
                         vocab_size=32768, max_seq_len=4096, name="meta-llama/Llama-2-7b-hf")
# The measured GPUs: their rows in the measurements, the catalog GPU they are, its node name in
# the all-reduce table.
MEASURED_GPUS = {"a100": ("a100-80gb-sxm", "a100_dgx"), "h100": ("h100-sxm", "h100_dgx")}
KNOTS = (1, 2, 4, 8, 16, 32, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096)
ELEMENTWISE_OPS = ("input_layernorm", "post_attention_layernorm", "attn_rope", "mlp_act", "add")
SEARCH = np.exp(np.linspace(np.log(0.005), np.log(1.0), 400))  # compute efficiencies tried


def read_measured(name: str) -> list[dict]:
    """Rows of a shipped measurement table (`data/measured/<name>.csv.gz`) as dicts."""
    with gzip.open(MEASURED / f"{name}.csv.gz", "rt", newline="", encoding="utf-8") as f:
        return list(csv.DictReader(io.StringIO(f.read())))


def operator_rows(rows: list[dict], gpu: str) -> dict:
    """{op: (tp [N], tokens [N], measured seconds [N])} of one measured GPU."""
    mine = [r for r in rows if r["gpu"] == gpu]
    tp = np.array([int(r["tp"]) for r in mine])
    tokens = np.array([int(r["num_tokens"]) for r in mine])
    return {op: (tp, tokens, np.array([float(r[f"{op}_ms"]) for r in mine]) / 1e3)
            for op in (*MATMULS, *ELEMENTWISE_OPS, "emb")}


def _relative_lstsq(columns: list, measured: np.ndarray) -> np.ndarray:
    """Non-negative-ish least squares of measured ~ sum c_i x_i on relative error."""
    a = np.stack(columns, axis=1) / measured[:, None]
    coef, *_ = np.linalg.lstsq(a, np.ones_like(measured), rcond=None)
    return np.maximum(coef, 1e-30)  # per-byte costs are ~1e-12 s


def fit_efficiency(rows: list[dict], gpu: str, peak_flops: float, bandwidth: float,
                   arch: Architecture = LLAMA2_7B) -> Efficiency:
    ops = operator_rows(rows, gpu)
    elementwise = {}  # each: t = launch + bytes / (bandwidth x efficiency)
    for op in (*ELEMENTWISE_OPS, "emb"):
        tp, tokens, t = ops[op]
        x = np.concatenate([embedding_bytes(arch, tokens[tp == p], 2) if op == "emb" else
                            elementwise_bytes(arch, int(p), tokens[tp == p], 2)[op]
                            for p in np.unique(tp)])
        t = np.concatenate([t[tp == p] for p in np.unique(tp)])
        launch_e, per_byte = _relative_lstsq([np.ones_like(x), x], t)
        elementwise[op] = (float(launch_e), float(min(1 / (per_byte * bandwidth), 1.0)))
    # matmuls
    flops, nbytes, tokens, measured = [], [], [], []
    for op in MATMULS:
        tp, tok, t = ops[op]
        for p in np.unique(tp):
            at = tp == p
            f, wb, ab = matmul_counts(arch, int(p), tok[at], 2, 2)[op]
            flops.append(f)
            nbytes.append(wb + ab)
            tokens.append(tok[at])
            measured.append(t[at])
    flops, nbytes, tokens, measured = map(np.concatenate, (flops, nbytes, tokens, measured))
    small = tokens <= 16
    launch, per_byte = _relative_lstsq([np.ones(small.sum()), nbytes[small]], measured[small])
    memory = min(1 / (per_byte * bandwidth), 1.0)
    compute = np.full(len(KNOTS), 0.5)
    logk, logt = np.log2(KNOTS), np.log2(tokens)
    for _ in range(2):
        for k in range(len(KNOTS)):
            lo = logk[k - 1] if k else logk[0] - 1
            hi = logk[k + 1] if k + 1 < len(KNOTS) else logk[-1] + 1
            weight = np.clip(np.minimum((logt - lo) / (logk[k] - lo),
                                        (hi - logt) / (hi - logk[k])), 0, 1)
            near = weight > 0
            if not near.any():
                continue
            best, best_err = compute[k], np.inf
            for c in SEARCH:
                trial = compute.copy()
                trial[k] = c
                eff = Efficiency(KNOTS, tuple(trial), memory, launch, elementwise)
                pred = eff.launch_s + np.maximum(
                    flops[near] / (peak_flops * eff.compute_at(tokens[near])),
                    nbytes[near] / (bandwidth * memory))
                err = np.sum(weight[near] * np.log(pred / measured[near]) ** 2)
                if err < best_err:
                    best, best_err = c, err
            compute[k] = best
    return Efficiency(KNOTS, tuple(float(c) for c in compute), float(memory), float(launch),
                      elementwise)


def fit_all_reduce(rows: list[dict], node: str) -> dict:
    """{GPUs on one node: AllReduce} fitted to that node's single-node measurements."""
    out = {}
    for n in sorted({int(r["num_workers"]) for r in rows if r["node"] == node}):
        mine = [r for r in rows if r["node"] == node and int(r["num_workers"]) == n
                and int(r["devices_per_node"]) == n]
        if not mine:
            continue
        size = np.array([float(r["size_bytes"]) for r in mine])
        t = np.array([float(r["all_reduce_ms"]) for r in mine]) / 1e3
        latency, per_byte = _relative_lstsq([np.ones_like(size), 2 * (n - 1) / n * size], t)
        out[n] = AllReduce(float(latency), float(1 / per_byte))
    return out


def calibrate() -> dict:
    """Fit every measured GPU (its datasheet fp16 peak and bandwidth from the GPU catalog):
    what `data/calibration.json` holds."""
    from .catalog import gpus

    ops, all_reduce = read_measured("llama2_7b_layer_ops"), read_measured("all_reduce")
    fitted = {}
    for measured, (catalog_id, node) in MEASURED_GPUS.items():
        gpu = gpus()[catalog_id]
        eff = fit_efficiency(ops, measured, gpu["peak_tflops"]["fp16"] * 1e12,
                             gpu["memory_bandwidth_gbs"] * 1e9)
        fitted[measured] = {
            "catalog_id": catalog_id,
            "efficiency": eff.to_dict(),
            "all_reduce": {str(n): [round(a.latency_s, 9), round(a.bus_bandwidth, -6)]
                           for n, a in fit_all_reduce(all_reduce, node).items()}}
    return {"fitted_by": "sim.costs.hardware.calibration.calibrate",
            "measurements": "Vidur profiling data (Agrawal et al., MLSys 2024), MIT licence: "
                            "Llama-2-7B operator times on A100 and H100 (fp16, tp 1-8), NCCL "
                            "all-reduce on DGX A100 and DGX H100 nodes",
            "gpus": fitted}


def write_calibration() -> Path:
    """Refit and write data/calibration.json."""
    import json

    path = MEASURED.parent / "calibration.json"
    path.write_text(json.dumps(calibrate(), indent=1) + "\n", encoding="utf-8")
    return path
