"""How far servesim carries a fused MoE kernel measured at other shapes to a model's experts
(the time at as many rows an expert, scaled by the experts' size): gpt-oss-120b's experts so
costed over their measured time, where a collection timed the kernel at both shapes, at every
power of two of tokens:
- Marlin's MXFP4 kernel (`hardware.moe_backend = "marlin"`, `KernelTables.moe_marlin`), from
  hidden 3,584, intermediate 3,072, 896 experts, top 16: SGLang 0.5.14 on the RTX PRO 6000;
- mxfp4 experts with MXFP8 activations (`hardware.activation_scheme = "mxfp8"`,
  `KernelTables.moe_mxfp8`), from hidden 4,096, intermediate 2,048, 256 experts, top 6, the
  shape nearest gpt-oss's that vLLM 0.24 timed on the B200: SGLang 0.5.14 on the B200;
and how far one framework's rows of that kernel stand for another's (vLLM 0.24's over SGLang
0.5.14's, at the shape both timed on the B200), where a run's collection lacks the model's shape
and the other's has it.
Run by `hardware_accuracy.py --only tables`, or alone:

    python benchmarks/moe_transfer.py
"""

from __future__ import annotations

import numpy as np

GPT_OSS = (2880, 2880, 4, 128)  # hidden, intermediate, top-k, experts
OTHER = (3584, 3072, 16, 896)  # the shape vLLM 0.24 measured Marlin at on the H100 and H200
NEAREST_MXFP8 = (4096, 2048, 6, 256)  # of the two vLLM 0.24 timed MXFP8 activations at (B200)


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
        own, _ = tables.nearest_moe_curve(path, "w4a16_mxfp4", GPT_OSS, tp, 1, "power_law_1.2",
                                           kernel="marlin")
        carried, shape = measured.moe_marlin(tokens, *GPT_OSS, tp, 1, "w4a16_mxfp4", at=OTHER)
        assert shape == OTHER
        ratio = carried / (np.exp(own.log_at(np.log(tokens))) * 1e-3)
        prefill = ratio[(tokens >= 2048) & (tokens <= 8192)]
        print(f"  TP {tp}: " + " ".join(f"{int(n)}:{r:.2f}" for n, r in zip(tokens, ratio))
              + f"  (range {ratio.min():.2f}-{ratio.max():.2f}; 2,048-8,192 tokens "
                f"{prefill.min():.2f}-{prefill.max():.2f})")


def mxfp8_transfer() -> None:
    from sim.costs.hardware import kernels, moe_tables, tables

    if kernels.data_root() is None:
        return
    measured = kernels.KernelTables("b200", "sglang", "0.5.14")
    path = measured.table_path("moe", "moe_perf.parquet")
    tokens = 2.0 ** np.arange(0, 15)
    print("mxfp4 experts with MXFP8 activations on the B200 (SGLang 0.5.14): gpt-oss-120b's "
          "experts costed from another shape (hidden 4096, intermediate 2048, 256 experts, "
          "top 6) over their measured time")
    for tp in (1, 2, 4, 8):
        own, _ = tables.nearest_moe_curve(path, "w4a8_mxfp4_mxfp8", GPT_OSS, tp, 1,
                                          "power_law_1.2", at=GPT_OSS)
        found = tables.nearest_moe_curve(path, "w4a8_mxfp4_mxfp8", GPT_OSS, tp, 1,
                                         "power_law_1.2", at=NEAREST_MXFP8)
        carried, shape = moe_tables.transferred(found, tokens, GPT_OSS)
        assert shape == NEAREST_MXFP8
        ratio = carried / (np.exp(own.log_at(np.log(tokens))) * 1e-3)
        print(f"  TP {tp}: " + " ".join(f"{int(n)}:{r:.2f}" for n, r in zip(tokens, ratio))
              + f"  (median {np.median(ratio):.2f}, range {ratio.min():.2f}-{ratio.max():.2f})")


def mxfp8_frameworks() -> None:
    """vLLM 0.24's and SGLang 0.5.14's B200 rows of the same kernel (mxfp4 experts with MXFP8
    activations, FlashInfer's TensorRT-LLM kernel) at the shape both timed: how far one
    framework's rows stand for another's, where vLLM's lack a model's shape and SGLang's have
    it (`KernelTables.moe_mxfp8`)."""
    from sim.costs.hardware import kernels, tables

    if kernels.data_root() is None:
        return
    paths = [kernels.KernelTables("b200", framework).table_path("moe", "moe_perf.parquet")
             for framework in ("vllm", "sglang")]
    tokens = 2.0 ** np.arange(0, 15)
    print("the same kernel timed by vLLM 0.24 over SGLang 0.5.14 on the B200 (hidden 4096, "
          "intermediate 2048, 256 experts, top 6)")
    for tp in (1, 2, 4, 8):
        vllm, sglang = (tables.nearest_moe_curve(path, "w4a8_mxfp4_mxfp8", NEAREST_MXFP8, tp, 1,
                                                 "power_law_1.2", kernel="flashinfer_trtllm",
                                                 at=NEAREST_MXFP8)[0] for path in paths)
        ratio = np.exp(vllm.log_at(np.log(tokens)) - sglang.log_at(np.log(tokens)))
        print(f"  TP {tp}: median {np.median(ratio):.2f}, range {ratio.min():.2f}-"
              f"{ratio.max():.2f}")


def moe_transfer() -> None:
    marlin_transfer()
    mxfp8_transfer()
    mxfp8_frameworks()


if __name__ == "__main__":
    moe_transfer()
