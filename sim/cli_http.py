"""The `servesim` commands that talk HTTP: `serve` (the engine behind an OpenAI-compatible API,
`sim.http`), `bench` (any such server measured from the client, `sim.bench`) and `validate
--against URL`; `sim.cli` parses the command line and handles their errors.
"""

from __future__ import annotations

from .cli import RunFailed, UsageError, load_scenario, manifest, output_dir


def cmd_bench(args) -> int:
    import reports

    from .bench import bench
    from .bench.outcome import any_succeeded, outcome_line

    options = bench_options(args, "URL")
    scenario = load_scenario(args)
    args.out_dir = out_dir = output_dir(args.out, scenario.name, "-bench")
    try:
        runs, files = bench(scenario, options, out_dir, manifest("bench", scenario))
    except (ValueError, FileNotFoundError) as exc:
        raise RunFailed(f"{scenario.name}: {exc}") from None
    results = [(run.spec, run.recorder) for run in runs]
    print(reports.summary_text(results, files.summaries))
    for run in runs:
        print(f"{run.spec.label}: {run.notes[-1]}")
    print(f"\n{len(files.files) + 1} files written to {out_dir}/; report: "
          f"{out_dir / files.html.name}")
    sent = [result for run in runs for result in run.results]
    print(outcome_line(sent))
    return 0 if any_succeeded(sent) else 1


def bench_options(args, url_flag: str):
    """The `sim.bench.BenchOptions` of `bench` (and `validate --against`), the server's URL
    (given as `url_flag`) and the endpoint checked; --max-concurrency is the scenario's
    `workload.max_concurrency`, as in `run`."""
    from .bench import BenchOptions
    from .bench.urls import check_base_url, check_endpoint

    for flag, value, check in ((url_flag, args.url, check_base_url),
                               ("--endpoint", args.endpoint, check_endpoint)):
        try:
            check(value)
        except ValueError as exc:
            raise UsageError(f"{flag} {exc}") from None
    if args.timeout is not None and not args.timeout > 0:
        raise UsageError("--timeout must be a positive number of seconds")
    return BenchOptions(args.url, args.endpoint, args.model,
                        args.timeout or BenchOptions.timeout_s, prompt=args.prompt,
                        progress=not args.quiet)


SERVE_VARIANT = "continuous"  # what `serve` with no scenario serves: as vLLM, continuous batching


def cmd_serve(args) -> int:
    import scenarios

    from .cli import DEFAULT_SCENARIO
    from .http import serve_scenario

    if args.max_waiting is not None and args.max_waiting < 1:
        raise UsageError("--max-waiting must be a positive integer")
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port {args.port}: must be from 0 to 65535 (0: any free port)")
    scenario = scenarios.load(args.scenario or DEFAULT_SCENARIO, args.set or ())
    specs = scenario.runs()
    name = args.variant or (specs[0].variant if args.scenario else SERVE_VARIANT)
    spec = next((s for s in specs if s.variant == name), None)
    if spec is None:
        raise UsageError(f"--variant {name}: the scenario's variants are "
                         f"{', '.join(scenario.variant_names)}")
    try:
        serve_scenario(spec.config, args.host, args.port, args.max_waiting,
                       f"{scenario.name} (variant {name})")
    except ValueError as exc:
        raise UsageError(f"{scenario.name}: {exc}") from None
    return 0


def validate_against_cmd(args) -> int:
    from .bench.outcome import any_succeeded, outcome_line
    from .validation.against import validate_against

    args.url = args.against
    options = bench_options(args, "--against")
    scenario = load_scenario(args)
    if args.variant is None and len(scenario.variants) > 1:
        raise UsageError(f"--against: the server runs one of the scenario's variants "
                         f"({', '.join(scenario.variant_names)}); name it with --variant")
    args.out_dir = out_dir = output_dir(args.out, scenario.name, "-validate")
    try:
        text, sent = validate_against(scenario, options, out_dir, profile=args.profile,
                                      manifest=manifest("validate", scenario))
    except (ValueError, FileNotFoundError) as exc:
        import scenarios

        if isinstance(exc, scenarios.ScenarioError):
            raise
        raise RunFailed(f"{scenario.name}: {exc}") from None
    print(text)
    print(outcome_line(sent))
    return 0 if any_succeeded(sent) else 1


def add_client_flags(parser) -> None:
    """The HTTP client's options of `bench` and `validate --against` (`sim.bench`)."""
    group = parser.add_argument_group("HTTP client (bench, validate --against)")
    group.add_argument("--endpoint", default="/v1/completions", metavar="PATH",
                       help="/v1/completions (default) or /v1/chat/completions")
    group.add_argument("--model", dest="model", metavar="NAME",
                       help="the model to ask for (default: the first of GET /v1/models)")
    group.add_argument("--timeout", type=float, metavar="S",
                       help="seconds a request may take before it counts as failed "
                            "(default: 600)")
    group.add_argument("--prompt", choices=("ids", "text"),
                       help="prompts as token id lists (default for completions) or as "
                            "calibrated text (default for chat)")
