"""How far `hardware.moe_backend = "marlin"` carries Marlin's measured MoE kernel from the shape
it was measured at to a model's: on the one GPU and framework whose tables time Marlin's MXFP4
kernel at both gpt-oss-120b's shape and the other (SGLang 0.5.14 on the RTX PRO 6000), gpt-oss's
experts costed from the other shape by the model's own `KernelTables.moe_marlin` (the time at as
many rows an expert, scaled by the experts' size) over their measured time, at every power of
two from 16 to 16,384 tokens. Run by `hardware_accuracy.py --only tables`, or alone:

    python benchmarks/marlin_transfer.py
"""

from __future__ import annotations

import numpy as np

GPT_OSS = (2880, 2880, 4, 128)  # hidden, intermediate, top-k, experts
OTHER = (3584, 3072, 16, 896)  # the shape vLLM 0.24 measured Marlin at on the H100 and H200


def marlin_transfer() -> None:
    from sim.costs.hardware import kernels, tables

    if kernels.data_root() is None:
        print("the measured kernel tables need servesim[gpu] (pip install 'servesim[gpu]')")
        return
    measured = kernels.KernelTables("rtx-pro-6000", "sglang", "0.5.14")
    path = measured.table_path("moe", "moe_perf.parquet")
    tokens = 2.0 ** np.arange(4, 15)
    print("Marlin's MXFP4 MoE kernel on the RTX PRO 6000 (SGLang 0.5.14): gpt-oss-120b's "
          "experts costed from another shape (hidden 3584, intermediate 3072, 896 experts, "
          "top 16) over their measured time")
    for tp in (1, 2):
        own, _ = tables.marlin_moe_curve(path, "w4a16_mxfp4", GPT_OSS, tp, 1, "power_law_1.2")
        carried, shape = measured.moe_marlin(tokens, *GPT_OSS, tp, 1, "w4a16_mxfp4", at=OTHER)
        assert shape == OTHER
        ratio = carried / (np.exp(own.log_at(np.log(tokens))) * 1e-3)
        prefill = ratio[(tokens >= 2048) & (tokens <= 8192)]
        print(f"  TP {tp}: " + " ".join(f"{int(n)}:{r:.2f}" for n, r in zip(tokens, ratio))
              + f"  (range {ratio.min():.2f}-{ratio.max():.2f}; 2,048-8,192 tokens "
                f"{prefill.min():.2f}-{prefill.max():.2f})")


if __name__ == "__main__":
    marlin_transfer()
