"""From a resolved scenario config to the hardware a run simulates: the model's architecture,
the GPU, tensor and expert parallelism, the weights' and the KV cache's dtypes, the memory plan
and the KV blocks it leaves (`engine.num_kv_blocks = "auto"`), every problem a one-line
ValueError naming the key.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ...notes import say_once
from .architecture import Architecture
from .catalog import Gpu, gpu_spec, gpus_with, model_architecture
from .checkpoint import say_checkpoint
from .dtypes import (DTYPE_BYTES, EXPERT_BYTES, FRAMEWORK_STATE_DTYPES, activation_dtype,
                     compute_dtype, expert_bytes)
from .fit import check_fits, checked_kv_blocks
from .kernels import SYSTEMS, KernelTables, TablesMiss, data_root
from .measured import MeasuredOps
from .memory import GIB, MEMORY_RULES, MemoryPlan, memory_plan


def kv_cache_dtype(dtype: str, kv_dtype: str = "auto") -> str:
    """The KV cache's dtype: `kv_dtype`, or for "auto" the model's activation dtype (the
    weights' for fp32, fp16 and bf16; bf16 under fp8 or nvfp4 weights, as vLLM's "auto" takes
    the checkpoint's bf16 dtype)."""
    return kv_dtype if kv_dtype != "auto" else activation_dtype(dtype)


@dataclass(frozen=True)
class HardwareSetup:
    arch: Architecture
    gpu: Gpu
    tp: int
    dtype: str
    plan: MemoryPlan
    kv_blocks: int  # engine.num_kv_blocks: derived ("auto") or given
    block_size: int
    ep: int = 1  # expert parallelism: 1 or tp x dp
    kv_dtype: str = "auto"
    kernels: MeasuredOps | None = None  # the measured kernel tables' operators (None: roofline)
    dp: int = 1  # attention data-parallel ranks of tp GPUs each (kv_blocks: one rank's)
    framework: str = "vllm"  # the server modelled: its KV sizing, and its tables if measured
    state_blocks: int = 0  # KV blocks a running sequence's linear-attention state takes (vLLM)

    @property
    def weight_bytes(self) -> float:
        return DTYPE_BYTES[self.dtype]

    @property
    def expert_bytes(self) -> float:
        """Bytes of a routed expert's weight element (mxfp4: MXFP4's, the others bf16)."""
        return expert_bytes(self.dtype)

    @property
    def kv_bytes(self) -> float:
        """Bytes of a cached key or value element."""
        return DTYPE_BYTES[kv_cache_dtype(self.dtype, self.kv_dtype)]

    @property
    def act_bytes(self) -> float:
        """Bytes of an activation element: fp16/bf16 on a GPU (fp8 and nvfp4 models included),
        fp32 for an fp32 model (the NumPy engine)."""
        return 4 if self.dtype == "fp32" else 2

    def describe(self) -> dict:
        """What a report says of the hardware: the model, GPU, parallelism, dtypes and
        memory."""
        plan = self.plan
        return {"model": self.arch.name, "parameters": self.arch.parameters(),
                "active_parameters": self.arch.active_parameters(),
                "gpu": self.gpu.id, "gpu_name": self.gpu.name, "tp": self.tp, "ep": self.ep,
                "dp": self.dp,
                "dtype": self.dtype, "kv_dtype": kv_cache_dtype(self.dtype, self.kv_dtype),
                # what the measured fp8 GEMMs were costed with (the roofline has no such choice)
                "activation_scheme": self.kernels.activations
                if self.kernels is not None and (self.dtype == "fp8"
                                                 or self.kernels.activations == "mxfp8")
                else None,
                "weights_gib_per_gpu": plan.weights / GIB,
                "activations_gib_per_gpu": plan.activations / GIB,
                "kv_gib_per_gpu": self.kv_blocks * self.block_size * plan.kv_bytes_per_token
                / GIB, "kv_bytes_per_token_per_gpu": plan.kv_bytes_per_token,
                "kv_blocks": self.kv_blocks, "kv_tokens": self.kv_blocks * self.block_size,
                "kernels": self.kernels.describe() if self.kernels else "roofline",
                "framework": self.framework,
                "framework_version": self.kernels.tables.version if self.kernels else None,
                "kernel_sources": self.kernels.sources() if self.kernels else {},
                "moe_kernel": self.kernels.moe_kernel_text() if self.kernels else None} | (
                    {"states_gib_per_gpu": plan.states / GIB} if plan.states else {}) | (
                    {"state_blocks": self.state_blocks} if self.state_blocks else {})


def check_dtypes(arch: Architecture, gpu: Gpu, dtype: str, kv_dtype: str = "auto",
                 activation_scheme: str = "static", moe_backend: str = "auto") -> str:
    """The KV cache's dtype, once the GPU computes in `dtype`, the model has what `dtype`
    quantizes, and the KV dtype, activation scheme and MoE kernel go with them (else a
    ValueError naming the key)."""
    gpu.peak_flops(compute_dtype(dtype))  # the GPU computes in this dtype
    activations = activation_dtype(dtype)
    if activations not in gpu.peak_tflops:  # a GPU a table defines, with quantized peaks only
        raise ValueError(f"hardware.gpu.peak_tflops: {dtype} weights keep {activations} "
                         f"activations (attention, the LM head and the routers run in them); "
                         f"give {gpu.id} a {activations} peak")
    if dtype in EXPERT_BYTES and not arch.is_moe:
        raise ValueError(f"hardware.dtype: mxfp4 quantizes a mixture of experts' routed experts "
                         f"(gpt-oss's checkpoints); {arch.name or 'the model'} has none (use "
                         f"fp16, bf16, fp8 or nvfp4)")
    kv_dtype = kv_cache_dtype(dtype, kv_dtype)
    if kv_dtype == "fp8" and "fp8" not in gpu.peak_tflops:
        raise ValueError(f"hardware.kv_dtype: an fp8 KV cache needs a GPU with fp8 support; "
                         f"{gpu.id} has none (use fp16 or bf16, or one of "
                         f"{', '.join(gpus_with('fp8'))})")
    if activation_scheme == "mxfp8" and dtype != "mxfp4":
        raise ValueError(f"hardware.activation_scheme: \"mxfp8\" quantizes mxfp4 experts' "
                         f"activations (hardware.dtype = \"mxfp4\"), not {dtype} weights")
    if activation_scheme == "mxfp8" and "nvfp4" not in gpu.peak_tflops:
        raise ValueError(f"hardware.activation_scheme: \"mxfp8\" needs a GPU with MXFP8 tensor "
                         f"cores; {gpu.id} has none (use \"static\", bf16 activations, or one of "
                         f"{', '.join(gpus_with('nvfp4'))})")
    if activation_scheme not in ("static", "mxfp8") and dtype != "fp8":
        raise ValueError(f"hardware.activation_scheme: \"{activation_scheme}\" applies to fp8 "
                         f"weights (hardware.dtype = \"fp8\"), not {dtype}")
    if moe_backend == "triton" and not arch.is_moe:
        raise ValueError(f"hardware.moe_backend: \"triton\" costs a mixture of experts' routed "
                         f"experts; {arch.name or 'the model'} has none; use \"auto\"")
    if moe_backend != "auto" and activation_scheme == "mxfp8":
        raise ValueError(f"hardware.moe_backend: \"{moe_backend}\" computes mxfp4 experts with "
                         f"bf16 activations; activation_scheme = \"mxfp8\" runs them on "
                         f"FlashInfer's TensorRT-LLM kernel: use \"auto\"")
    if moe_backend == "marlin" and not (arch.is_moe and dtype == "mxfp4"):
        has = f"{dtype} weights" if arch.is_moe else f"{arch.name or 'the model'}, without experts"
        raise ValueError(f"hardware.moe_backend: \"marlin\" costs mxfp4 experts (Marlin's "
                         f"weight-only kernel, as the tables measured it), not {has}; use "
                         f"\"auto\"")
    return kv_dtype


def hardware_setup(config) -> HardwareSetup:
    """The hardware of a resolved config (`scenarios.RunConfig`) whose cost.model is
    "hardware"."""
    hardware, engine = config.hardware, config.engine
    rule = MEMORY_RULES.get(hardware.framework)  # how it reads gpu_memory_utilization
    if rule is None:
        raise ValueError(f"hardware.framework: must be one of {', '.join(MEMORY_RULES)}, got "
                         f"{hardware.framework!r}")
    arch = model_architecture(config.model.given())
    if arch.linear_layers and not arch.state_dtype:  # neither the file nor the scenario names it
        arch = replace(arch, state_dtype=FRAMEWORK_STATE_DTYPES[hardware.framework])
    gpu = gpu_spec(hardware.gpu)
    tp, ep, dp, dtype = hardware.tp, hardware.ep, hardware.dp, hardware.dtype
    arch.check_tp(tp)
    arch.check_ep(ep, tp, dp)
    if arch.linear_layers and engine.enable_prefix_caching:
        raise ValueError(f"engine.enable_prefix_caching: {arch.name} has {arch.linear_layers} "
                         f"linear-attention layers, whose state, not keys, a cached prefix "
                         f"would have to restore, which servesim does not model; set "
                         f"engine.enable_prefix_caching = false")
    kv_dtype = check_dtypes(arch, gpu, dtype, hardware.kv_dtype, hardware.activation_scheme,
                            hardware.moe_backend)
    if config.model.config:
        say_checkpoint(config.model.config, dtype, hardware.activation_scheme)
    size, kv_size = DTYPE_BYTES[dtype], DTYPE_BYTES[kv_dtype]
    # vLLM's own capacity policy takes each running sequence's state from the KV blocks; the
    # others set states aside (memory.py)
    pooled = bool(arch.linear_layers) and hardware.framework == "vllm" and \
        config.scheduler.capacity_scheduler_policy == "max_utilization"

    def plan_for(degree: int) -> MemoryPlan:
        return memory_plan(arch, gpu.memory_bytes, hardware.gpu_memory_utilization, degree,
                           size, kv_size, engine.block_size, engine.max_num_batched_tokens,
                           engine.max_num_seqs, ep=degree * dp if ep > 1 else 1, dp=dp,
                           expert_bytes=expert_bytes(dtype), rule=rule,
                           reserve_states=not pooled)

    plan = plan_for(tp)
    check_fits(arch, gpu, hardware, plan, plan_for, engine)
    blocks, state_blocks = checked_kv_blocks(arch, gpu, hardware, plan, engine, pooled)
    measured = measured_ops(hardware, arch, gpu, tp, dtype, ep)
    if measured is None and hardware.activation_scheme != "static":
        kernels, what = ("MoE", "the experts alike with bf16 or MXFP8 activations") \
            if hardware.activation_scheme == "mxfp8" else ("fp8", "fp8 GEMMs alike under every "
                                                                  "scheme")
        say_once(f"note: hardware.activation_scheme = \"{hardware.activation_scheme}\" picks "
                 f"among measured {kernels} kernels; the roofline, which costs this run, costs "
                 f"{what}")
    if measured is None and hardware.moe_backend != "auto":
        say_once(f"note: hardware.moe_backend = \"{hardware.moe_backend}\" picks among "
                 f"measured MoE kernels; the roofline, which costs this run, costs the experts "
                 f"alike under every kernel")
    return HardwareSetup(arch, gpu, tp, dtype, plan, blocks, engine.block_size, ep,
                         hardware.kv_dtype, measured, dp, hardware.framework, state_blocks)


def kernel_tables(gpu: Gpu, framework: str, version: str | None = None) -> KernelTables:
    """The measured tables of a catalog GPU (`KernelTables`); TablesMiss for a GPU defined by
    a table, whatever its name: it has none."""
    if not gpu.in_catalog:
        raise TablesMiss(f"no measured kernel tables for a GPU defined by a table ({gpu.id!r}; "
                         f"tables exist for catalog GPUs: {', '.join(SYSTEMS)})")
    return KernelTables(gpu.id, framework, version)


def measured_ops(hardware, arch, gpu, tp: int, dtype: str, ep: int) -> MeasuredOps | None:
    """The measured kernel tables' operators of `hardware.kernels` (unset: measured where the
    GPU has tables and servesim[gpu] is installed, else the roofline, said once); a version or
    a GPU the tables do not have is a one-line ValueError naming the key (a version is checked
    even where the roofline is asked for: it names tables that must exist). A GPU defined in
    the scenario (a table, not a catalog id) has no tables, whatever its name."""
    version = hardware.framework_version
    if hardware.kernels == "roofline" and (version is None or data_root() is None):
        if version is not None:
            say_once(f"note: hardware.framework_version = {version!r} is not checked: "
                     f"servesim[gpu], which has the tables, is not installed, and "
                     f"hardware.kernels = \"roofline\" reads none")
        return None
    try:
        tables = kernel_tables(gpu, hardware.framework, version)
    except TablesMiss as exc:
        if hardware.kernels == "measured" or version is not None:
            # a GPU without tables is the version's fault when one was asked for; a missing
            # servesim[gpu] stays hardware.kernels'
            about_version = version is not None and exc.key == "hardware.kernels" \
                and (data_root() is not None or hardware.kernels is None)
            key = "hardware.framework_version" if about_version else exc.key
            raise ValueError(f"{key}: {exc}") from None
        framework = f", not {hardware.framework}'s kernels" if data_root() is not None else ""
        say_once(f"note: {exc}; the hardware model costs every operator by the roofline"
                 f"{framework} (hardware.kernels = \"roofline\" says so without this note)")
        return None
    if hardware.kernels == "roofline":
        return None  # the version checked, not used
    ops = MeasuredOps(arch, tp, dtype, kv_cache_dtype(dtype, hardware.kv_dtype), tables, ep,
                      hardware.activation_scheme, hardware.dp, hardware.moe_backend)
    refused = ops.refusal()
    if refused:
        raise ValueError(f"hardware.{refused[0]}: {refused[1]}")
    return ops
