"""A scenario `servesim validate` serves and simulates in a moment: two variants of a few
short requests on a tiny model, with the linear cost model."""

from __future__ import annotations

SCENARIO = """
name = "validate-case"
description = "A handful of short requests on a tiny model."
seed = 3
[model]
vocab_size = 64
d_model = 32
n_layers = 2
n_heads = 2
d_ff = 64
max_seq_len = 256
[engine]
block_size = 8
num_kv_blocks = 64
max_num_seqs = 4
[cost]
model = "linear"
step_overhead_s = 0.0005
prefill_token_s = 0.00001
decode_seq_s = 0.0001
context_token_s = 0.000001
[workload]
num_requests = 6
arrival = { process = "poisson", rate = 40.0 }
prompt_tokens = { dist = "uniform", low = 4, high = 40 }
output_tokens = { dist = "uniform", low = 2, high = 12 }
warmup_s = 0.001  # the first request is served, not counted, in every figure
[[variants]]
name = "continuous"
[[variants]]
name = "static"
set = { "scheduler.policy" = "static", "scheduler.max_batch_size" = 3 }
"""
