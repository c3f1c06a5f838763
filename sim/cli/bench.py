"""`servesim bench`: replay a scenario's requests against any OpenAI-compatible server, measure
them from the client as `vllm bench serve` does (`sim.bench`) and write the report.
"""

from __future__ import annotations

from .client_flags import add_client_flags, bench_options
from .common import (DEFAULT_SCENARIO, SERVE_VARIANT, RunFailed, add_common_flags,
                     load_scenario, manifest, output_dir)
from .flags import add_workload_flags
from .result_flags import add_result_flags, result_percentiles


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("bench", help="replay a scenario's requests against an "
                                                 "OpenAI-compatible server and write the report")
    parser.add_argument("url", help="the server's base URL, e.g. http://127.0.0.1:8000")
    parser.add_argument("scenario", nargs="?",
                        help=f"built-in name or TOML path (default: {DEFAULT_SCENARIO}, its "
                             f"{SERVE_VARIANT} variant: what `servesim serve` serves)")
    add_common_flags(parser, "output directory (default: out/<scenario name>-bench/)",
                     "bench this variant's workload only (default: every variant's distinct "
                     f"workload; without SCENARIO: {SERVE_VARIANT})")
    add_workload_flags(parser)
    add_result_flags(parser)
    add_client_flags(parser)
    parser.set_defaults(func=cmd_bench)


def cmd_bench(args) -> int:
    import reports

    from ..bench import bench
    from ..bench.outcome import any_succeeded, outcome_line
    from ..bench.run import distinct_runs, unbenchable

    options = bench_options(args, "URL")
    if args.scenario is None:  # the default scenario as `serve` serves it, not its first variant
        args.scenario, args.variant = DEFAULT_SCENARIO, args.variant or SERVE_VARIANT
    scenario = load_scenario(args)
    for spec in distinct_runs(scenario.runs()):  # what cannot be sent: refused before any is
        problem = unbenchable(spec.config)
        if problem is not None:
            raise scenario.error(problem, spec)
    args.out_dir = out_dir = output_dir(args.out, scenario.name, "-bench")
    percentiles = result_percentiles(args)
    try:
        runs, files = bench(scenario, options, out_dir,
                            manifest("bench", scenario) | percentiles.record(), percentiles)
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
