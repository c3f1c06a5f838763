"""GPU memory: what the weights take, what is kept for activations, and the KV capacity left,
as the serving framework derives it.

Per GPU, vLLM lets the engine use `gpu_memory_utilization` of the GPU's memory; from that it
takes the weights (the GPU's shard), the peak activation memory of a forward pass of
`max_num_batched_tokens` tokens (which it measures with a dummy run; estimated here: the
largest intermediate tensors of one layer and the logits of `max_num_seqs` sequences in fp32),
and memory outside PyTorch's allocator (CUDA context, NCCL buffers: `NON_TORCH_BYTES`, an
assumption). What remains holds KV blocks of `block_size` tokens at `kv_bytes_per_token` each.
The other frameworks read the fraction their own way (`MEMORY_RULES`). TensorRT-LLM's
(`free_gpu_memory_fraction`, default 0.9) is of what the weights, the activations and the
memory outside the allocator leave: its KV cache is that fraction of the memory less all of
them (its `KvCacheCreator`, after a profiling run). SGLang's (`--mem-fraction-static`) is the
share of the memory for the weights, the KV pool and the memory outside the allocator, a step's
activations (and CUDA graphs) kept beside it: its KV cache is the fraction of the memory less
the weights and the memory outside the allocator (`ModelRunner.profile_max_num_token`).

A model with linear-attention layers keeps a state of fixed size for each sequence beside its
KV cache (`Sizes.state_bytes_per_seq`). SGLang sets aside a pool of states before the KV cache
(with its radix cache off, `max_running_requests` of them), and TensorRT-LLM keeps one for each
of its `max_batch_size` sequences: the plan sets aside `max_num_seqs` states (`reserve_states`).
vLLM's hybrid cache manager takes each running request's state from the KV blocks' pool
instead: under vLLM with its own capacity policy the plan sets none aside and a sequence's
state takes `state_blocks` of the blocks while it runs (`engine.block_manager.BlockManager`;
under another policy they are set aside, as SGLang's are).
"""

from __future__ import annotations

from dataclasses import dataclass

from .architecture import Architecture, valid_tps

# how each framework reads hardware.gpu_memory_utilization (module docstring)
MEMORY_RULES = {"vllm": "whole", "trtllm": "free", "sglang": "static"}

NON_TORCH_BYTES = 1.0 * 2**30  # CUDA context, cuBLAS workspace, NCCL buffers (an assumption)
ACT_BYTES = 2  # activations in fp16 / bf16
GIB = 2**30


@dataclass(frozen=True)
class MemoryPlan:
    usable: float  # bytes the server takes: weights, activations, outside, KV cache
    weights: float  # bytes of the GPU's weight shard
    activations: float  # bytes kept for a forward pass's peak
    non_torch: float
    kv_bytes_per_token: float  # on one GPU
    block_size: int
    states: float = 0.0  # bytes of max_num_seqs sequences' linear-attention states

    @property
    def kv_bytes(self) -> float:
        return self.usable - self.weights - self.activations - self.non_torch - self.states

    @property
    def kv_blocks(self) -> int:
        """KV blocks that fit (0 or fewer: the model does not fit)."""
        return int(self.kv_bytes // (self.block_size * self.kv_bytes_per_token))

    @property
    def needed(self) -> float:
        """Bytes needed before any KV block (weights, activations, outside the allocator,
        linear-attention states)."""
        return self.weights + self.activations + self.non_torch + self.states


def activation_bytes(arch: Architecture, tp: int, max_tokens: int, max_seqs: int,
                     ep: int = 1, dp: int = 1) -> float:
    """Peak activation memory of a forward pass of `max_tokens` tokens: the residual stream,
    the widest intermediate (QKV or the latent attention's projections, the MLP's up
    projection, the routed experts' up projections of a token's k pairs; this GPU's shard) and
    its output, and `max_seqs` rows of fp32 logits. With attention data parallelism the
    routed experts take every rank's tokens (`dp` x `max_tokens`)."""
    gated = 2 if arch.gated_mlp else 1
    if arch.is_mla:
        heads = arch.n_heads // tp
        widths = [arch.q_lora_rank + arch.latent_dim, heads * arch.hd,
                  heads * (arch.qk_nope_head_dim + arch.v_head_dim)]
    else:
        widths = [arch.q_proj_dim // tp + 2 * arch.kv_heads_per_gpu(tp) * arch.hd]
    if arch.linear_layers:  # its input projection's outputs
        widths.append((2 * arch.linear_qk + 2 * arch.linear_values
                       + 2 * arch.linear_v_heads) // tp)
    if arch.dense_layers:
        widths.append(gated * arch.d_ff // tp)
    if arch.is_moe:
        widths.append(dp * arch.experts_per_token * gated * arch.moe_d_ff
                      // (1 if ep > 1 else tp * dp))
        widths.append(gated * arch.shared_ff // tp)
    hidden = max_tokens * (2 * arch.d_model + 2 * max(widths)) * ACT_BYTES
    return hidden + max_seqs * arch.vocab_size * 4


def memory_plan(arch: Architecture, memory_bytes: float, utilization: float, tp: int,
                weight_bytes: float, kv_bytes: float, block_size: int, max_tokens: int,
                max_seqs: int, ep: int = 1, dp: int = 1, expert_bytes: float | None = None,
                rule: str = "whole", reserve_states: bool = True) -> MemoryPlan:
    """One GPU's plan (of one data-parallel rank: `max_tokens` and `max_seqs` are a rank's).
    `utilization` by `rule`: "whole", of the whole memory (vLLM's); "free", of what the
    weights, activations and memory outside the allocator leave (TensorRT-LLM's); "static", of
    the whole memory for all but the activations, which are beside it (SGLang's).
    `reserve_states`: `max_seqs` linear-attention states set aside (else they take KV blocks
    while their sequences run: module docstring)."""
    weights = arch.weight_bytes_per_gpu(tp, weight_bytes, ep, dp, expert_bytes)
    activations = activation_bytes(arch, tp, max_tokens, max_seqs, ep, dp)
    states = max_seqs * arch.state_bytes_per_seq(tp, ACT_BYTES) if reserve_states else 0.0
    usable = memory_bytes * utilization
    if rule == "free":  # the states are allocated before the KV cache is sized
        needed = weights + activations + NON_TORCH_BYTES + states
        usable = needed + utilization * max(memory_bytes - needed, 0.0)
    elif rule == "static":
        usable += activations
    return MemoryPlan(usable, weights, activations, NON_TORCH_BYTES,
                      arch.kv_bytes_per_token(tp, kv_bytes), block_size, states)


def smallest_tp(arch: Architecture, plan_for, limit: int = 8) -> int | None:
    """The smallest valid tensor-parallel degree (up to `limit`) whose plan holds at least one
    KV block; `plan_for(tp)` gives the plan (with expert parallelism, at ep = tp x dp)."""
    for tp in valid_tps(arch, limit):
        if plan_for(tp).kv_blocks >= 1:
            return tp
    return None
