"""The notes a run costed from measured kernels gives where the tables' own measurement is
known to stand apart: vLLM 0.24's per-tensor fp8 MoE rows on Hopper, measured on FlashInfer's
CUTLASS kernel alone, 2.2 to 4 times its bf16 rows."""

from __future__ import annotations

import pytest

import sim
from sim.notes import collected


@pytest.mark.parametrize("gpu, framework, scheme, said", [
    ("h100-sxm", "vllm", "static", True),  # per-tensor experts: the slow rows, said
    ("h200", "vllm", "dynamic", True),
    ("h100-sxm", "vllm", "block", False),  # block-scaled experts: their own rows
    ("b200", "vllm", "static", False),  # Blackwell's per-tensor rows are below bf16's
    ("h100-sxm", "sglang", "static", False),
])
def test_vllms_per_tensor_fp8_experts_on_hopper_are_said(gpu, framework, scheme, said):
    with collected() as notes:
        times = sim.layer_op_times("Qwen/Qwen3-30B-A3B", gpu, 1, 64, dtype="fp8",
                                   framework=framework, activation_scheme=scheme)
    noted = [n for n in notes if "per-tensor fp8 MoE rows" in n]
    assert bool(noted) == said
    if said:
        assert noted[0].endswith('a block-scaled checkpoint (hardware.activation_scheme = '
                                 '"block": Qwen\'s and DeepSeek\'s own FP8 releases) reads its '
                                 'block-scaled rows (docs/sim/hardware.md, "Measured kernels")')
        bf16 = sim.layer_op_times("Qwen/Qwen3-30B-A3B", gpu, 1, 64, dtype="bf16",
                                  framework=framework)
        assert times["moe_experts"] > 2.2 * bf16["moe_experts"]  # as the note says
