"""The scheduler's knobs, validated once when the configuration is built.

Names follow vLLM where vLLM has the same knob (`max_num_seqs`, `max_num_batched_tokens`,
`chunked_prefill`), TensorRT-LLM where only it has one (`capacity_scheduler_policy`,
`batch_wait_*`), SGLang where only it has one (`enable_mixed_chunk`,
`scheduler_recv_interval`); `max_batch_size` and
`batch_timeout_s` belong to static batching only.
"""

from __future__ import annotations

from dataclasses import dataclass

from .queues import QUEUES

POLICIES = ("static", "continuous")
PREEMPTION_MODES = ("recompute", "swap")  # vLLM's preemption_mode
# TensorRT-LLM's capacity_scheduler_policy: admit while the first chunk's blocks are free and
# preempt when a running sequence finds none (vLLM's way; TensorRT-LLM's MAX_UTILIZATION), or
# admit only what the KV cache holds to every admitted sequence's last token (its default), or
# SGLang's admission: reserve a decaying share of the running requests' future tokens
# (`new_token_ratio.py`)
CAPACITY_POLICIES = ("max_utilization", "guaranteed_no_evict", "new_token_ratio")


@dataclass(frozen=True)
class SchedulerConfig:
    """Scheduling policy and limits. The defaults are vLLM-like for a small CPU model."""

    policy: str = "continuous"
    queue: str = "fcfs"
    chunked_prefill: bool = False
    max_num_seqs: int = 32  # most sequences running at once (continuous)
    max_num_batched_tokens: int = 2048  # per-step token budget (continuous)
    max_batch_size: int = 16  # static batch size
    batch_timeout_s: float = 0.0  # static: wait this long for a full batch (0: start at once)
    max_seq_len: int = 4096  # prompt + output limit, from the model
    preemption: str = "recompute"  # or "swap": victims' KV to host memory and back
    # Attention data-parallel ranks planned as one pool (continuous batching): every limit
    # above and the block manager's blocks are one rank's, times this many in all, and a
    # sequence stays within one rank's (its prefill chunk, its KV blocks)
    data_parallel_size: int = 1
    # TensorRT-LLM's batch waiting (continuous batching): while sequences decode, hold new
    # prefills back until they and the decodes fill this share of a step's token budget or
    # this many steps have held them (0: never hold)
    batch_wait_timeout_iters: int = 0
    batch_wait_max_tokens_ratio: float = 0.0
    capacity_scheduler_policy: str = "max_utilization"  # or "guaranteed_no_evict", ...
    # A step runs running sequences' decodes beside prefill chunks (vLLM's and TensorRT-LLM's
    # way); False: prefills run alone while any can run, the decodes wait (SGLang's default,
    # without its --enable-mixed-chunk; continuous batching)
    enable_mixed_chunk: bool = True
    # SGLang's --scheduler-recv-interval (continuous batching): new requests are read only
    # every this many steps of decodes, the step after one with a prefill, or at once when
    # nothing runs (1: every step; `recv_interval.py`)
    scheduler_recv_interval: int = 1

    @property
    def no_evict(self) -> bool:
        """Whether the capacity policy is guaranteed no evict (TensorRT-LLM's default)."""
        return self.capacity_scheduler_policy == "guaranteed_no_evict"

    @property
    def reserves_new_tokens(self) -> bool:
        """Whether admission reserves the running requests' future tokens as SGLang does."""
        return self.capacity_scheduler_policy == "new_token_ratio"

    def __post_init__(self):
        if self.policy not in POLICIES:
            raise ValueError(f"scheduler.policy must be one of {', '.join(POLICIES)}, "
                             f"got {self.policy!r}")
        if self.queue not in QUEUES:
            raise ValueError(f"scheduler.queue must be one of {', '.join(QUEUES)}, got {self.queue!r}")
        if self.preemption not in PREEMPTION_MODES:
            raise ValueError(f"scheduler.preemption must be one of "
                             f"{', '.join(PREEMPTION_MODES)}, got {self.preemption!r}")
        if self.capacity_scheduler_policy not in CAPACITY_POLICIES:
            raise ValueError(f"scheduler.capacity_scheduler_policy must be one of "
                             f"{', '.join(CAPACITY_POLICIES)}, got "
                             f"{self.capacity_scheduler_policy!r}")
        for name in ("chunked_prefill", "enable_mixed_chunk"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"scheduler.{name} must be true or false, "
                                 f"got {getattr(self, name)!r}")
        for name in ("max_num_seqs", "max_num_batched_tokens", "max_batch_size", "max_seq_len",
                     "data_parallel_size", "scheduler_recv_interval"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        timeout = self.batch_timeout_s
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout >= 0:
            raise ValueError(f"scheduler.batch_timeout_s must be a number >= 0, got {timeout!r}")
        iters, ratio = self.batch_wait_timeout_iters, self.batch_wait_max_tokens_ratio
        if isinstance(iters, bool) or not isinstance(iters, int) or iters < 0:
            raise ValueError(f"scheduler.batch_wait_timeout_iters must be an integer >= 0, "
                             f"got {iters!r}")
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 <= ratio <= 1:
            raise ValueError(f"scheduler.batch_wait_max_tokens_ratio must be a number from 0 to "
                             f"1, got {ratio!r}")
        if self.data_parallel_size > 1 and (iters or ratio):
            raise ValueError("scheduler.batch_wait_timeout_iters: batch waiting is for one "
                             "rank; TensorRT-LLM does not hold prefills under attention data "
                             "parallelism (hardware.dp > 1), it balances the ranks otherwise")
        if not self.enable_mixed_chunk and (iters or ratio):
            key = "batch_wait_timeout_iters" if iters else "batch_wait_max_tokens_ratio"
            raise ValueError(f"scheduler.{key}: batch waiting holds prefills back for the "
                             f"decodes' steps; with enable_mixed_chunk = false prefills never "
                             f"share a step with decodes (set enable_mixed_chunk = true, or "
                             f"batch_wait_timeout_iters = 0 and batch_wait_max_tokens_ratio = 0)")
        if self.policy == "static" and not self.enable_mixed_chunk:
            raise ValueError("scheduler.enable_mixed_chunk: static batching never mixes a "
                             "batch's prefill with decodes; the key is for continuous batching "
                             "(leave it true, or set policy = 'continuous')")
        if self.policy == "static" and self.scheduler_recv_interval > 1:
            raise ValueError("scheduler.scheduler_recv_interval: SGLang's receive interval is "
                             "continuous batching's (leave it 1, or set policy = "
                             "'continuous')")
        if self.policy == "static" and (iters or ratio):
            raise ValueError("scheduler.batch_wait_timeout_iters: batch waiting holds prefills "
                             "under continuous batching; static batching waits by "
                             "scheduler.batch_timeout_s")
        if self.policy == "static" and self.data_parallel_size > 1:
            raise ValueError("hardware.dp: attention data parallelism runs under continuous "
                             "batching (set scheduler.policy = 'continuous')")
        if self.policy == "static" and self.chunked_prefill:
            raise ValueError("scheduler.chunked_prefill: static batching prefills each batch "
                             "whole; chunked prefill is for continuous batching (set "
                             "chunked_prefill = false, or policy = 'continuous')")
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError(
                f"engine.max_num_batched_tokens ({self.max_num_batched_tokens}) must be >= "
                f"engine.max_num_seqs ({self.max_num_seqs}) so every running sequence can decode"
            )
        if self.reserves_new_tokens:
            self._check_new_token_ratio()

    def _check_new_token_ratio(self) -> None:
        key = "scheduler.capacity_scheduler_policy = 'new_token_ratio'"
        if self.policy == "static":
            raise ValueError(f"{key}: SGLang's admission is continuous batching's (set "
                             f"policy = 'continuous', or another capacity policy)")
        if self.preemption == "swap":
            raise ValueError(f"{key}: SGLang takes requests back by recompute (set preemption "
                             f"= 'recompute', or another capacity policy)")
        if self.batch_wait_timeout_iters or self.batch_wait_max_tokens_ratio:
            raise ValueError(f"{key}: batch waiting is TensorRT-LLM's, and its count of the "
                             f"prompts to hold knows nothing of SGLang's reserve (set "
                             f"batch_wait_timeout_iters = 0 and batch_wait_max_tokens_ratio = "
                             f"0, or another capacity policy)")
        if self.data_parallel_size > 1:
            raise ValueError(f"{key}: SGLang reserves each attention data-parallel rank's "
                             f"cache apart, which one pooled scheduler does not model (set "
                             f"hardware.dp = 1, or another capacity policy)")
