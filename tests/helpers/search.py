"""The scenario of a server whose capacity can be computed, for `servesim search`'s tests."""

from __future__ import annotations

from pathlib import Path

# One engine slot and one step of 10 ms a request (a prefill that samples the only output
# token): with constant arrivals nothing queues up to 100 requests/s, and every request after
# the first queues a little longer above it, so a TTFT SLO just above 10 ms holds for nine in
# ten of 100 requests up to 1 / (0.01 - 0.0005 / 90) = 100.06 requests/s and no further.
LINEAR = """
name = "linear-capacity"
[cost]
model = "linear"
step_overhead_s = 0.01
prefill_token_s = 0.0
decode_seq_s = 0.0
context_token_s = 0.0
[engine]
max_num_seqs = 1
[workload]
num_requests = 100
arrival = { process = "constant", rate = 10.0 }
prompt_tokens = { dist = "fixed", value = 16 }
output_tokens = { dist = "fixed", value = 1 }
[slo]
ttft_s = 0.0105
[search]
rate = { low = 10.0, high = 1000.0 }
tolerance = 0.01
"""
CAPACITY_RPS = 1 / (0.01 - 0.0005 / 90)


def linear_capacity(tmp_path) -> Path:
    """LINEAR written to `tmp_path`/linear.toml."""
    path = tmp_path / "linear.toml"
    path.write_text(LINEAR)
    return path
