"""Whether a model and its KV cache fit the GPUs a scenario gives them (`setup.hardware_setup`
asks, with the memory plan of `memory.py`): where it cannot run, the one-line ValueError that
says what would fit (`check_fits`); else the KV blocks a run gets, once they hold a sequence of
`model.max_seq_len` tokens, with the note vLLM's linear-attention states call for
(`checked_kv_blocks`; docs/sim/hardware.md, "KV capacity from memory").
"""

from __future__ import annotations

import math

from ...notes import say_once
from .architecture import Architecture
from .catalog import Gpu
from .dtypes import DTYPE_BYTES, EXPERT_BYTES
from .memory import ACT_BYTES, GIB, MEMORY_RULES, MemoryPlan, smallest_tp

# each framework's own name for the model's context length
CONTEXT_FLAGS = {"vllm": "vLLM's --max-model-len", "sglang": "SGLang's --context-length",
                 "trtllm": "trtllm-serve's --max_seq_len"}


def check_fits(arch: Architecture, gpu: Gpu, hardware, plan: MemoryPlan, plan_for,
               engine) -> None:
    """A ValueError naming what would fit where the weights and activations leave no KV block
    (`plan_for(tp)`: the plan at another TP), or where SGLang's activations do not fit beside
    its share of the memory."""
    rule = MEMORY_RULES[hardware.framework]
    if plan.kv_blocks < 1:
        raise ValueError(f"hardware: {arch.name} does not fit on {gpu.id} at tp = {hardware.tp} "
                         f"({hardware.dtype}): {_what_it_needs(gpu, hardware, plan, engine)}; "
                         f"{_what_would_fit(arch, gpu, hardware, plan, plan_for, engine)}")
    if rule == "static" and plan.usable > gpu.memory_bytes:
        beside = gpu.memory_bytes * (1 - hardware.gpu_memory_utilization)
        raise ValueError(
            f"hardware.gpu_memory_utilization: SGLang keeps a step's activations beside its "
            f"mem_fraction_static share, and {plan.activations / GIB:.1f} GiB of them (a step of "
            f"engine.max_num_batched_tokens = {engine.max_num_batched_tokens:,}) do not fit in "
            f"the {beside / GIB:.1f} GiB that {hardware.gpu_memory_utilization:g} of "
            f"{gpu.memory_gib:g} GiB leaves: use a smaller gpu_memory_utilization or "
            f"max_num_batched_tokens")


def _what_it_needs(gpu: Gpu, hardware, plan: MemoryPlan, engine) -> str:
    """What the model needs a GPU before any KV cache, and the room the framework gives it."""
    rule = MEMORY_RULES[hardware.framework]
    share = f"{gpu.memory_gib:g} GiB x gpu_memory_utilization " \
        f"{hardware.gpu_memory_utilization:g} = " \
        f"{gpu.memory_bytes * hardware.gpu_memory_utilization / GIB:.1f} GiB"
    needed, activations = plan.needed, f"{plan.activations / GIB:.1f} GiB of activations, "
    room = f"it has {gpu.memory_gib:g} GiB" if rule == "free" else f"{share} is usable"
    if rule == "static":  # the activations are beside the share, not in what it must hold
        needed, activations = plan.needed - plan.activations, ""
        room = (f"{share} holds them and the KV cache (SGLang's mem_fraction_static; the "
                f"activations are beside it)")
    if plan.states:
        activations += (f"{plan.states / GIB:.1f} GiB of linear-attention states for "
                        f"engine.max_num_seqs = {engine.max_num_seqs:,} sequences, ")
    return (f"it needs {needed / GIB:.1f} GiB per GPU before any KV cache "
            f"({plan.weights / GIB:.1f} GiB of weights, {activations}"
            f"{plan.non_torch / GIB:.1f} GiB outside the allocator) and {room}")


def _what_would_fit(arch: Architecture, gpu: Gpu, hardware, plan: MemoryPlan, plan_for,
                    engine) -> str:
    """The smallest TP that fits on one node, else the changes that could make it fit."""
    dp, ep, dtype = hardware.dp, hardware.ep, hardware.dtype
    fits = smallest_tp(arch, plan_for, 8 // dp)  # tp x dp GPUs of one node
    ranks = f" of {dp} data-parallel ranks" if dp > 1 else ""
    if fits:
        if ep == 1:
            degree = f"hardware.tp = {fits}"
        elif dp == 1:
            degree = f"hardware.tp = hardware.ep = {fits}"
        else:
            degree = f"hardware.tp = {fits} with hardware.ep = {fits * dp}"
        hint = f"the smallest tensor parallelism{ranks} that fits is {degree}"
        if plan.states:
            hint += ", or use a smaller engine.max_num_seqs (the linear-attention states)"
        return hint
    smaller = [] if dtype in EXPERT_BYTES else [  # mxfp4's experts are 4-bit already
        d for d in ("fp8", "nvfp4") if d in gpu.peak_tflops
        and DTYPE_BYTES[d] < DTYPE_BYTES[dtype]]
    options = ["a GPU with more memory"] + \
        [f"a smaller dtype ({', '.join(smaller)})"] * bool(smaller) + ["fewer ranks"] * (dp > 1)
    if MEMORY_RULES[hardware.framework] == "static":
        options = ["a larger hardware.gpu_memory_utilization"] + options  # only a larger share
    elif plan.activations > plan.weights:  # a step's size, not the model, is too large
        options = ["a smaller engine.max_num_batched_tokens or engine.max_num_seqs "
                   "(the activations)"] + options[:1]
    if plan.states:  # one linear-attention state for each of max_num_seqs sequences
        options = ["a smaller engine.max_num_seqs (the linear-attention states)"] + options
    return (f"no tensor parallelism{ranks} up to {8 // dp} fits: use "
            + ", ".join(options[:-1]) + " or " * (len(options) > 1) + options[-1])


def checked_kv_blocks(arch: Architecture, gpu: Gpu, hardware, plan: MemoryPlan, engine,
              pooled: bool) -> tuple[int, int]:
    """(KV blocks of the run: `engine.num_kv_blocks`, "auto" the plan's; the blocks a running
    sequence's linear-attention state takes, where they come from the blocks' pool: `pooled`),
    once they hold `model.max_seq_len` tokens of one sequence, else a one-line ValueError."""
    if engine.block_size > arch.max_seq_len:
        raise ValueError(f"engine.block_size: must be at most model.max_seq_len "
                         f"({arch.max_seq_len:,}), got {engine.block_size:,}")
    blocks = engine.num_kv_blocks
    if blocks == "auto":
        blocks = plan.kv_blocks
    elif blocks > plan.kv_blocks:
        need = blocks * engine.block_size * plan.kv_bytes_per_token / GIB
        share = {"whole": "left after the weights and activations",
                 "free": f"{hardware.gpu_memory_utilization:g} of what the weights and "
                         f"activations leave",
                 "static": f"left after the weights and the memory outside the allocator in "
                           f"{hardware.gpu_memory_utilization:g} of the memory"
                 }[MEMORY_RULES[hardware.framework]]
        raise ValueError(f"engine.num_kv_blocks: {blocks:,} blocks need {need:.1f} GiB of KV "
                         f"cache per GPU; {gpu.id} at tp = {hardware.tp} has "
                         f"{plan.kv_bytes / GIB:.1f} GiB for it, {share} ({plan.kv_blocks:,} "
                         f"blocks: use \"auto\")")
    state_blocks = math.ceil(arch.state_bytes_per_seq(hardware.tp, ACT_BYTES) / (
        engine.block_size * plan.kv_bytes_per_token)) if pooled else 0
    tokens = max(blocks - state_blocks, 0) * engine.block_size  # one sequence, its state beside
    if arch.max_seq_len > tokens:
        room = (plan.kv_blocks - state_blocks) * engine.block_size >= arch.max_seq_len
        more = f"raise engine.num_kv_blocks (up to {plan.kv_blocks:,}, or \"auto\")" \
            if engine.num_kv_blocks != "auto" and room else "use more GPUs"
        raise ValueError(f"model.max_seq_len: {arch.name}'s {arch.max_seq_len:,} tokens are more "
                         f"than the KV cache holds on {gpu.id} at tp = {hardware.tp} "
                         f"({tokens:,} tokens); set model.max_seq_len to at most {tokens:,} (as "
                         f"{CONTEXT_FLAGS[hardware.framework]}) or {more}")
    if plan.states and hardware.framework == "vllm":
        kv, states = blocks * engine.block_size * plan.kv_bytes_per_token, plan.states
        say_once(f"note: hardware: {arch.name}'s linear-attention states are set aside for "
                 f"engine.max_num_seqs = {engine.max_num_seqs:,} sequences ({states / GIB:.1f} "
                 f"GiB a GPU beside {kv / GIB:.1f} GiB of KV cache); vLLM takes each state from "
                 f"its KV blocks only while its request runs, so with fewer running it caches "
                 f"more tokens than here (docs/sim/hardware.md, \"KV capacity from memory\")")
    return blocks, state_blocks
