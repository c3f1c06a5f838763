"""`servesim bench`: replay a scenario's workload against an OpenAI-compatible server.

- `sse.py`: the server-sent events of a streamed completion, and what each chunk carries;
- `timing.py`: one request as the client saw it, and its latencies;
- `prompts.py`: prompts of a given token count for a tokenizer the client does not know;
- `client.py`: the requests over HTTP (aiohttp), at the workload's arrival times;
- `http_io.py`: what every request shares: the target, the API key's header, a body read within
  limits, a fault in one line;
- `discovery.py`: the server's model (`GET /v1/models`) and the probe prompts' token counts;
- `checked.py`: what a server sends, checked before anything is read from it;
- `urls.py`: the server's base URL and the endpoint, checked;
- `outcome.py`: the line `servesim bench` prints last;
- `recorder.py`: the responses as a `RunRecorder`, so every report reads them;
- `run.py`: `bench(scenario, url, out_dir)`: replay, record, write the report.
"""

from .run import BenchOptions, bench, bench_runs

__all__ = ["BenchOptions", "bench", "bench_runs"]
