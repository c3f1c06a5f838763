"""`servesim serve`: a scenario's real NumPy engine behind an OpenAI-compatible HTTP API
(`sim.http`), until Ctrl-C or SIGTERM, with BLAS on one thread unless the environment says
otherwise (`blas_threads`).
"""

from __future__ import annotations

from ..profiling import threads
from .common import DEFAULT_SCENARIO, SERVE_VARIANT, UsageError, manifest
from .flag_types import port_number, positive_integer


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("serve", help="serve a scenario's engine behind an "
                                                 "OpenAI-compatible HTTP API")
    parser.add_argument("scenario", nargs="?",
                        help=f"built-in name or TOML path (default: {DEFAULT_SCENARIO}, its "
                             f"continuous variant)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on "
                                                            "(default: 127.0.0.1)")
    parser.add_argument("--port", type=port_number, default=8000,
                        help="port (default: 8000; 0: any free)")
    parser.add_argument("--set", action="extend", nargs="+", metavar="KEY=VALUE",
                        help="override a dotted key, e.g. model.n_layers=1 (repeatable; values "
                             "are TOML)")
    parser.add_argument("--variant", metavar="NAME",
                        help="the scenario variant whose settings are served (default: the "
                             "first of a named scenario)")
    parser.add_argument("--max-waiting", type=positive_integer, metavar="N",
                        help="answer 429 while N requests wait for admission (default: no "
                             "limit)")
    parser.add_argument("--write-tokenizer", metavar="DIR",
                        help="write the served model's tokenizer to DIR in Hugging Face's "
                             "format as the server starts, for clients that count tokens "
                             "(vllm bench serve, guidellm, aiperf: --tokenizer DIR)")
    parser.set_defaults(func=cmd_serve, blas_threads=blas_threads)


def blas_threads(args) -> int:
    """One: the engine steps one batch at a time, and BLAS threads spinning beside it on a
    shared machine slow every step down severalfold (docs/server/http.md)."""
    return threads.DEFAULT_THREADS


def cmd_serve(args) -> int:
    import scenarios
    from reports.places import check_place, written_by

    from ..http import serve_scenario

    scenario = scenarios.load(args.scenario or DEFAULT_SCENARIO, args.set or (),
                              variant=args.variant or (None if args.scenario else SERVE_VARIANT))
    specs = scenario.runs()
    name = args.variant or (specs[0].variant if args.scenario else SERVE_VARIANT)
    spec = next((s for s in specs if s.variant == name), None)
    if spec is None:
        raise UsageError(f"--variant {name}: the scenario's variants are "
                         f"{', '.join(scenario.variant_names)}")
    if args.write_tokenizer is not None:
        if not args.write_tokenizer.strip():
            raise UsageError("--write-tokenizer: an empty path; give a folder, e.g. "
                             "--write-tokenizer tokenizer")
        check_place(args.write_tokenizer)  # refused now, before the model is built
        other = written_by(args.write_tokenizer)
        if other not in (None, "serve"):  # a run's results are not to be lost to a tokenizer
            raise UsageError(f"--write-tokenizer {args.write_tokenizer}: holds the output of "
                             f"servesim {other}; give another folder")
    try:
        serve_scenario(spec.config, args.host, args.port, args.max_waiting,
                       f"{scenario.name} (variant {name})", args.write_tokenizer,
                       manifest("serve", scenario))
    except ValueError as exc:
        raise scenario.error(str(exc), spec) from None
    return 0
