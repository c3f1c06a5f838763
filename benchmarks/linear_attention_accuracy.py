"""The Gated DeltaNet kernels (linear attention: Qwen3-Next, Qwen3.5) against their measured
tables (`gdn_perf`, every GPU and framework that has them), the convolution's and the delta
rule's times added at each point both were measured at, as the model adds them: (a) each
(heads, batch) curve's points with every other point held out (prompt length in prefill, batch
in decode), predicted by interpolating the rest (log-log, as the model does); (b) every measured
point predicted by the roofline a run uses (`attention.linear_group` and `StepAttention`; its
prefill's `DELTA_STEP_S` and `DELTA_EFFICIENCY` were fitted to these tables, so its prefill
figures are in sample). Median and p90 of |predicted - measured| / measured, per framework and
phase. Run by `hardware_accuracy.py --only tables`, or alone:

    python benchmarks/linear_attention_accuracy.py   # about 8 seconds
"""

from __future__ import annotations

import numpy as np

from table_accuracy import _held_out, _sorted


def linear_attention_accuracy() -> None:
    from sim.costs.hardware import kernels, tables

    if kernels.data_root() is None:
        print("the measured kernel tables need servesim[gpu] (pip install 'servesim[gpu]')")
        return
    errors: dict = {}
    for gpu in kernels.SYSTEMS:
        for framework in kernels.FRAMEWORKS:
            try:
                measured = kernels.KernelTables(gpu, framework)
            except kernels.TablesMiss:
                continue
            path = measured.table_path("linear_attention", "gdn_perf.parquet")
            if path is None:
                continue
            table = tables.cached_table(path)
            for k_heads, v_heads in sorted(set(zip(table["num_k_heads"],
                                                   table["num_v_heads"]))):
                for decode in (False, True):
                    found = _errors(path, gpu, int(k_heads), int(v_heads), decode)
                    if found is None:
                        continue
                    phase = errors.setdefault((framework, decode), ([], []))
                    phase[0].extend(found[0])
                    phase[1].extend(found[1])
    print("Gated DeltaNet (the convolution and the delta rule of a linear-attention layer), "
          "against the measured tables of every GPU:")
    print(f"{'framework':10s} {'phase':8s} {'held out':>8s} {'interp median':>14s} {'p90':>7s} "
          f"{'points':>7s} {'roofline median':>16s} {'p90':>7s}")
    for (framework, decode), (interp, roof) in sorted(errors.items()):
        print(f"{framework:10s} {'decode' if decode else 'prefill':8s} {len(interp):8d} "
              f"{100 * np.median(interp):13.1f}% {100 * np.quantile(interp, 0.9):6.1f}% "
              f"{len(roof):7d} {100 * np.median(roof):15.1f}% "
              f"{100 * np.quantile(roof, 0.9):6.1f}%")


def _errors(path: str, gpu: str, k_heads: int, v_heads: int, decode: bool):
    """(|held-out interpolation errors|, |roofline errors|) of one GPU's kernels of these
    heads (the points the model looks up, `tables.gdn_points`), or None where the phase is
    not measured."""
    from sim.costs.hardware import tables

    summed = tables.gdn_points(path, k_heads, v_heads, 128, 128, decode)
    if summed is None:
        return None
    interp = []
    for _, curve in summed.groupby("seq_len" if decode else "batch_size"):
        sizes = curve.index.get_level_values("batch_size" if decode else "seq_len")
        if len(sizes) >= 3:
            interp.extend(_held_out(*_sorted(sizes.to_numpy(), curve.to_numpy())))
    attention = _roofline(gpu, k_heads, v_heads, decode)
    roof = [abs(attention(batch, length) / (milliseconds * 1e-3) - 1)
            for (batch, length), milliseconds in summed.items()]
    return interp, roof


def _roofline(gpu_id: str, k_heads: int, v_heads: int, decode: bool):
    """(sequences, length) -> one linear-attention layer's seconds by the roofline, bf16."""
    from sim.costs.hardware import gpu_spec
    from sim.costs.hardware.architecture import Architecture
    from sim.costs.hardware.attention import StepAttention, linear_group
    from sim.costs.shape import StepShape

    gpu = gpu_spec(gpu_id)
    eff = gpu.efficiency()
    arch = Architecture(n_layers=2, d_model=4096, n_heads=32, n_kv_heads=4, d_ff=1024,
                        vocab_size=1024, max_seq_len=65536, linear_layers=1,
                        linear_k_heads=k_heads, linear_v_heads=v_heads, linear_k_dim=128,
                        linear_v_dim=128, linear_conv=4, state_dtype="fp32")  # Qwen3.5's
    group = linear_group(arch, 1, "decode" if decode else "prefill", eff,
                         gpu.peak_flops("bf16"), gpu.bandwidth, 2)

    class Rows:  # the roofline's linear attention reads no table by rows
        def compute_at(self, rows):
            return float(eff.compute_at(rows))

        def block_projections(self, rows):
            return 0.0

    step = StepAttention((group,), (group,), None, Rows(), eff.compute[-1], True, gpu_id)
    if decode:
        return lambda batch, length: step.plus_decode(0.0, batch, batch)
    return lambda batch, length: step.plus_prefill(0.0, StepShape(
        prefill_tokens=batch * length, prefill_seqs=batch,
        prefill_attention=batch * length * length, prefill_square=batch * length * length))


if __name__ == "__main__":
    import os
    import sys

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    linear_attention_accuracy()
