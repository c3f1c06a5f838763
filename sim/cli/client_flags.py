"""The HTTP client's options of `bench` and `validate --against`: its flags and the
`sim.bench.BenchOptions` they make, with the server's URL and the endpoint checked.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from .common import UsageError
from .flag_types import seconds_or_inf


DEFAULT_ENDPOINT = "/v1/completions"


def add_client_flags(parser) -> None:
    """The HTTP client's options of `bench` and `validate --against` (`sim.bench`)."""
    group = parser.add_argument_group("HTTP client (bench, validate --against)")
    group.add_argument("--endpoint", metavar="PATH",
                       help="/v1/completions (default) or /v1/chat/completions")
    group.add_argument("--model", dest="model", metavar="NAME",
                       help="the model to ask for (default: the first of GET /v1/models)")
    group.add_argument("--timeout", type=seconds_or_inf, metavar="S",
                       help="seconds a request may take before it counts as failed "
                            "(default: 600; inf: no limit)")
    group.add_argument("--prompt", choices=("ids", "text"),
                       help="prompts as token id lists (default for completions) or as "
                            "calibrated text (default for chat)")


def bench_options(args, url_flag: str):
    """The `sim.bench.BenchOptions` of `bench` (and `validate --against`), the server's URL
    (given as `url_flag`) and the endpoint checked; --max-concurrency is the scenario's
    `workload.max_concurrency`, as in `run`."""
    from ..bench import BenchOptions
    from ..bench.http_io import check_api_key
    from ..bench.urls import check_base_url, check_endpoint, is_chat

    if args.endpoint is None:
        args.endpoint = DEFAULT_ENDPOINT
    for flag, value, check in ((url_flag, args.url, check_base_url),
                               ("--endpoint", args.endpoint, check_endpoint)):
        try:
            check(value)
        except ValueError as exc:
            raise UsageError(f"{flag} {exc}") from None
    path = urlsplit(args.url).path.rstrip("/")
    if path.endswith("/v1") and args.endpoint.startswith("/v1/"):
        raise UsageError(f"{url_flag} {args.url}: ends in /v1 and --endpoint {args.endpoint} "
                         f"begins with it, so every request would go to {path}{args.endpoint}; "
                         f"give the server's root (http://HOST:PORT, as vLLM's --base-url)")
    if args.prompt == "ids" and is_chat(args.endpoint):
        raise UsageError(f"--prompt ids: a chat endpoint ({args.endpoint}) takes messages of "
                         f"text, not token ids; use --prompt text")
    try:
        check_api_key()
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return BenchOptions(args.url, args.endpoint, args.model,
                        args.timeout or BenchOptions.timeout_s, prompt=args.prompt,
                        progress=not args.quiet)
