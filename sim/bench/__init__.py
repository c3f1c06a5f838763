"""`servesim bench`: replay a scenario's workload against an OpenAI-compatible server.

- `sse.py`: the server-sent events of a streamed completion, and what each chunk carries;
- `timing.py`: one request as the client saw it, and its latencies;
- `prompts.py`: prompts of a given token count for a tokenizer the client does not know;
- `client.py`: the requests over HTTP (aiohttp), at the workload's arrival times;
- `recorder.py`: the responses as a `RunRecorder`, so every report reads them;
- `run.py`: `bench(scenario, url, out_dir)`: replay, record, write the report.
"""

from .run import BenchOptions, bench, bench_runs

__all__ = ["BenchOptions", "bench", "bench_runs"]
