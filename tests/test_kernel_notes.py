"""The notes a run gives where what it costs is known to stand apart from what is served:
vLLM 0.24's per-tensor fp8 MoE rows on Hopper, measured on FlashInfer's CUTLASS kernel alone,
2.2 to 4 times its bf16 rows; and a quantized checkpoint that keeps some of its layers'
matrices in bf16, costed in the scenario's dtype."""

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


def test_a_checkpoint_that_keeps_layers_in_bf16_is_said(tmp_path):
    """NVIDIA's NVFP4 Qwen3.5-397B-A17B keeps its attention, linear attention and shared
    experts in bf16 (`quantization_config.ignore`); servesim costs them in nvfp4 and says so.
    A checkpoint whose ignore list holds norms and routers alone gets no such note."""
    import json

    import scenarios
    from helpers.hybrid import PACKAGE_CONFIGS
    from helpers.model_scenario import scenario
    from sim.costs.hardware import hardware_setup

    path = str(PACKAGE_CONFIGS / "nvidia--Qwen3.5-397B-A17B-NVFP4_config.json")
    toml = scenario(tmp_path, model=f'config = "{path}"', gpu="b200", tp=8,
                    hardware='dtype = "nvfp4"\nep = 8')
    with collected() as notes:
        hardware_setup(scenarios.load(toml, ["engine.enable_prefix_caching = false"]).base)
    assert f"note: model.config: {path}: its quantization_config leaves the attention, the " \
        f"linear attention and the shared experts in bf16 (its ignore list); servesim costs " \
        f"them in nvfp4 with the rest: their bytes and times come out below the " \
        f"checkpoint's" in notes
    table = json.loads(open(path).read())
    table["quantization_config"]["ignore"] = ["lm_head", "*.mlp.gate"]
    (tmp_path / "norms.json").write_text(json.dumps(table))
    toml = scenario(tmp_path, model=f'config = "{tmp_path / "norms.json"}"', gpu="b200", tp=8,
                    hardware='dtype = "nvfp4"\nep = 8')
    with collected() as notes:
        hardware_setup(scenarios.load(toml, ["engine.enable_prefix_caching = false"]).base)
    assert not [n for n in notes if "in bf16 (its ignore list)" in n]
