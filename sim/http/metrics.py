"""Prometheus metrics of the HTTP server, under vLLM's names so dashboards built for vLLM read
them: gauges of running and waiting requests and KV cache usage, prompt and generation token
counters, and histograms of time to first token and inter-token latency.

The engine thread writes them, the event loop renders them (`render`): every access holds the
lock.
"""

from __future__ import annotations

import bisect
import threading

# vLLM's bucket bounds (seconds)
TTFT_BUCKETS_S = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                  5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS_S = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
                 7.5, 10.0, 20.0, 40.0, 80.0)
GAUGES = {"vllm:num_requests_running": "Number of requests in the running batch.",
          "vllm:num_requests_waiting": "Number of requests waiting to be admitted.",
          "vllm:kv_cache_usage_perc": "KV cache usage: the fraction of KV blocks in use (1 = full).",
          "vllm:gpu_cache_usage_perc": "The same as vllm:kv_cache_usage_perc (older vLLM name)."}
COUNTERS = {"vllm:prompt_tokens_total": "Prompt tokens of admitted requests.",
            "vllm:generation_tokens_total": "Tokens generated."}


class Histogram:
    """Cumulative-bucket histogram of seconds."""

    def __init__(self, bounds_s: tuple[float, ...]):
        self.bounds_s = bounds_s
        self.counts = [0] * (len(bounds_s) + 1)  # the last: above every bound
        self.sum_s = 0.0

    def observe(self, value_s: float) -> None:
        self.counts[bisect.bisect_left(self.bounds_s, value_s)] += 1
        self.sum_s += value_s

    def lines(self, name: str, labels: str) -> list[str]:
        out, total = [], 0
        for bound, count in zip(self.bounds_s + (float("inf"),), self.counts):
            total += count
            le = "+Inf" if bound == float("inf") else repr(bound)
            out.append(f'{name}_bucket{{{labels},le="{le}"}} {total}')
        return out + [f"{name}_sum{{{labels}}} {self.sum_s!r}", f"{name}_count{{{labels}}} {total}"]


class ServerMetrics:
    """The server's metrics for one model; thread-safe."""

    def __init__(self, model_name: str):
        self.labels = f'model_name="{model_name}"'
        self.lock = threading.Lock()
        self.gauges = dict.fromkeys(GAUGES, 0.0)
        self.counters = dict.fromkeys(COUNTERS, 0)
        self.ttft = Histogram(TTFT_BUCKETS_S)
        self.itl = Histogram(ITL_BUCKETS_S)

    def set_state(self, running: int, waiting: int, kv_usage: float) -> None:
        with self.lock:
            self.gauges["vllm:num_requests_running"] = running
            self.gauges["vllm:num_requests_waiting"] = waiting
            self.gauges["vllm:kv_cache_usage_perc"] = kv_usage
            self.gauges["vllm:gpu_cache_usage_perc"] = kv_usage

    def count_prompt(self, n_tokens: int) -> None:
        with self.lock:
            self.counters["vllm:prompt_tokens_total"] += n_tokens

    def observe_step(self, ttfts_s: list[float], itls_s: list[float], n_tokens: int) -> None:
        """One engine step: the first-token latencies and inter-token gaps it ended."""
        with self.lock:
            self.counters["vllm:generation_tokens_total"] += n_tokens
            for value in ttfts_s:
                self.ttft.observe(value)
            for value in itls_s:
                self.itl.observe(value)

    def render(self) -> str:
        """The Prometheus text exposition format (version 0.0.4)."""
        lines = []
        with self.lock:
            for name, value in self.gauges.items():
                lines += _family(name, "gauge", GAUGES[name], [f"{name}{{{self.labels}}} {value}"])
            for name, value in self.counters.items():
                lines += _family(name, "counter", COUNTERS[name],
                                 [f"{name}{{{self.labels}}} {value}"])
            lines += _family("vllm:time_to_first_token_seconds", "histogram",
                             "Time from a request's arrival to its first token.",
                             self.ttft.lines("vllm:time_to_first_token_seconds", self.labels))
            for name in ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"):
                lines += _family(name, "histogram", "Time between a request's consecutive tokens.",
                                 self.itl.lines(name, self.labels))
        return "\n".join(lines) + "\n"


def _family(name: str, kind: str, help_text: str, samples: list[str]) -> list[str]:
    return [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", *samples]
