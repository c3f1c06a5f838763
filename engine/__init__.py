"""servesim's inference engine: a complete mini LLM inference server in NumPy.

Every part of the engine is a set of public functions re-exported here, in the order a request
meets them: sampling, tokenization, the transformer with a contiguous KV cache, the paged KV cache,
sequences and static batching, continuous batching and scheduling, the serving API, and
benchmarking. The classes behind them (`Scheduler`, `BlockManager`, `NumpyExecutor`, `LLMEngine`,
`Server`) are what the simulator drives too.
"""

# Part 1: sampling
from .sampling import (apply_temperature, greedy_select, sample_from_probs, sample_token,
                       stable_softmax, top_k_filter, top_p_filter)
# Part 2: tokenization
from .tokenizer import build_vocab, decode_tokens, encode_prompt
# Part 3: the transformer with a contiguous KV cache
from .model import ModelConfig, init_params, load_params, normalize_params, save_params
from .kv_cache import append_kv, init_kv_cache
from .transformer import (causal_attention, embed_tokens, forward_full, linear_projection,
                          model_decode_step, model_prefill)
# Part 4: the paged KV cache
from .block_manager import BlockError, BlockManager, OutOfBlocksError
from .paged_kv_cache import (PagedAllocator, PagedKVStorage, allocate_block, append_to_paged_cache,
                             blocks_needed, free_block, free_sequence_blocks,
                             gather_kv_from_blocks, init_block_allocator, kv_blocks_in_use,
                             paged_attention_step)
# Part 5: sequences and static batching
from .sequence import GREEDY, SamplingParams, Sequence, SequenceStatus
from .sequences import (generate_single_sequence, init_sequence_state, is_sequence_done,
                        make_request, sequence_decode_step)
from .batching import batched_decode_step, build_batch_step_input, static_batch_generate
from .executor import NumpyExecutor, StepResult
# Part 6: continuous batching and scheduling
from .scheduler import Scheduler, SchedulerConfig, StepPlan
from .queues import FcfsQueue, PriorityQueue, priority_queue_pop, priority_queue_push
from .continuous_batching import (continuous_batch_step, has_free_capacity, preempt_sequence,
                                  run_continuous_batching, schedule_step, select_admissions)
from .llm_engine import LLMEngine, StepOutput
from .records import RunRecorder
# Part 7: the serving API
from .server import (Server, build_completion_response, collect_request_output,
                     drive_until_complete, format_stream_chunk, serve, submit_request)
# Part 8: benchmarking
from .benchmark import (aggregate_throughput, inter_token_latency, latency_percentiles,
                        request_metrics, run_benchmark, summarize, time_to_first_token,
                        weighted_percentile)
from .vllm_figures import latency_std, peak_figures, vllm_summary

__all__ = [name for name in dir() if not name.startswith("_")]
