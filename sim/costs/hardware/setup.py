"""From a resolved scenario config to the hardware a run simulates: the model's architecture,
the GPU, tensor parallelism, dtype, the memory plan and the KV blocks it leaves
(`engine.num_kv_blocks = "auto"`), every problem a one-line ValueError naming the key.
"""

from __future__ import annotations

from dataclasses import dataclass

from .architecture import DTYPE_BYTES, Architecture
from .catalog import Gpu, gpu_spec, model_architecture
from .kernels import KernelTables, TablesMiss
from .measured import MeasuredOps, say_once
from .memory import GIB, MemoryPlan, memory_plan, smallest_tp


@dataclass(frozen=True)
class HardwareSetup:
    arch: Architecture
    gpu: Gpu
    tp: int
    dtype: str
    plan: MemoryPlan
    kv_blocks: int  # engine.num_kv_blocks: derived ("auto") or given
    block_size: int
    kernels: MeasuredOps | None = None  # the measured kernel tables' operators (None: roofline)

    @property
    def weight_bytes(self) -> float:
        return DTYPE_BYTES[self.dtype]

    @property
    def act_bytes(self) -> float:
        """Bytes of an activation element: fp16/bf16 on a GPU (fp8 models included), fp32 for
        an fp32 model (the NumPy engine)."""
        return 4 if self.dtype == "fp32" else 2

    def describe(self) -> dict:
        """What a report says of the hardware: the model, GPU, TP, dtype and memory."""
        plan = self.plan
        return {"model": self.arch.name, "parameters": self.arch.parameters(),
                "gpu": self.gpu.id, "gpu_name": self.gpu.name, "tp": self.tp,
                "dtype": self.dtype, "weights_gib_per_gpu": plan.weights / GIB,
                "activations_gib_per_gpu": plan.activations / GIB,
                "kv_gib_per_gpu": self.kv_blocks * self.block_size * plan.kv_bytes_per_token
                / GIB, "kv_bytes_per_token_per_gpu": plan.kv_bytes_per_token,
                "kv_blocks": self.kv_blocks, "kv_tokens": self.kv_blocks * self.block_size,
                "kernels": self.kernels.describe() if self.kernels else "roofline",
                "kernel_sources": self.kernels.sources() if self.kernels else {}}


def hardware_setup(config) -> HardwareSetup:
    """The hardware of a resolved config (`scenarios.RunConfig`) whose cost.model is
    "hardware"."""
    hardware, engine = config.hardware, config.engine
    arch = model_architecture(config.model.given())
    gpu = gpu_spec(hardware.gpu)
    tp, dtype = hardware.tp, hardware.dtype
    arch.check_tp(tp)
    gpu.peak_flops(dtype)  # the GPU computes in this dtype
    size = DTYPE_BYTES[dtype]

    def plan_for(degree: int) -> MemoryPlan:
        return memory_plan(arch, gpu.memory_bytes, hardware.gpu_memory_utilization, degree,
                           size, size, engine.block_size, engine.max_num_batched_tokens,
                           engine.max_num_seqs)

    plan = plan_for(tp)
    if plan.kv_blocks < 1:
        fits = smallest_tp(arch, plan_for)
        hint = (f"the smallest tensor parallelism that fits is hardware.tp = {fits}" if fits
                else "no tensor parallelism up to 8 fits: use a GPU with more memory or fp8")
        raise ValueError(
            f"hardware: {arch.name} does not fit on {gpu.id} at tp = {tp} ({dtype}): it needs "
            f"{plan.needed / GIB:.1f} GiB per GPU before any KV cache ({plan.weights / GIB:.1f} "
            f"GiB of weights, {plan.activations / GIB:.1f} GiB of activations, "
            f"{plan.non_torch / GIB:.1f} GiB outside the allocator) and "
            f"{gpu.memory_gib:g} GiB x gpu_memory_utilization "
            f"{hardware.gpu_memory_utilization:g} = {plan.usable / GIB:.1f} GiB is usable; "
            f"{hint}")
    blocks = engine.num_kv_blocks
    if blocks == "auto":
        blocks = plan.kv_blocks
    elif blocks > plan.kv_blocks:
        need = blocks * engine.block_size * plan.kv_bytes_per_token / GIB
        raise ValueError(f"engine.num_kv_blocks: {blocks:,} blocks need {need:.1f} GiB of KV "
                         f"cache per GPU; {gpu.id} at tp = {tp} has {plan.kv_bytes / GIB:.1f} "
                         f"GiB left after the weights and activations ({plan.kv_blocks:,} "
                         f"blocks: use \"auto\")")
    tokens = blocks * engine.block_size
    if arch.max_seq_len > tokens:
        raise ValueError(f"model.max_seq_len: {arch.name}'s {arch.max_seq_len:,} tokens are more "
                         f"than the KV cache holds on {gpu.id} at tp = {tp} ({tokens:,} tokens); "
                         f"set model.max_seq_len to at most {tokens:,} (as vLLM's "
                         f"--max-model-len) or use more GPUs")
    return HardwareSetup(arch, gpu, tp, dtype, plan, blocks, engine.block_size,
                         measured_ops(hardware, arch, gpu, tp, dtype))


def measured_ops(hardware, arch, gpu, tp: int, dtype: str) -> MeasuredOps | None:
    """The measured kernel tables' operators of `hardware.kernels` (unset: measured where the
    GPU has tables and servesim[gpu] is installed, else the roofline, said once); a version or
    a GPU the tables do not have is a one-line ValueError naming the key."""
    if hardware.kernels == "roofline":
        return None
    try:
        tables = KernelTables(gpu.id, hardware.framework, hardware.framework_version)
    except TablesMiss as exc:
        if hardware.kernels == "measured" or hardware.framework_version is not None:
            raise ValueError(f"hardware.kernels: {exc}") from None
        say_once(f"note: {exc}; the hardware model costs every operator by the roofline "
                 f"(hardware.kernels = \"roofline\" says so without this note)")
        return None
    kv_dtype = "bf16" if dtype in ("fp8", "nvfp4") else dtype  # vLLM's "auto" KV dtype
    return MeasuredOps(arch, tp, dtype, kv_dtype, tables)
