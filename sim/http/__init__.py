"""The OpenAI-compatible HTTP server over the real NumPy engine (`servesim serve`).

`serve.py` builds a scenario's engine and serves it until a signal; `server.py` is the aiohttp
application; `engine_thread.py` steps the engine on its own thread and hands tokens (and
failures) to the event loop; `protocol.py` reads requests and writes responses in the OpenAI
shapes, `messages.py` reads chat messages and their content parts, `errors.py` turns every
failure into the OpenAI error body; `text.py` turns text into token ids and back (a character
tokenizer, the chat template, stop strings), `hf_tokenizer.py` writes that tokenizer in Hugging
Face's format for clients; `metrics.py` keeps the Prometheus metrics.
See docs/server/http.md.
"""

from .serve import engine_for, serve_scenario
from .server import Model, RunningServer, build_app, start_server

__all__ = ["Model", "RunningServer", "build_app", "engine_for", "serve_scenario", "start_server"]
