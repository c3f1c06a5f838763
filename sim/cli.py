"""The `servesim` command line.

    servesim run [SCENARIO] [--out DIR] [--set KEY=VALUE ...] [--quiet]
    servesim scenarios
    servesim profile [--model KEY=VALUE ...] [--out FILE] [--quick] [--threads N]
    servesim validate SCENARIO [--out DIR] [--profile auto|NAME|PATH] [--calibrate]

Each subcommand is one `cmd_*` function taking the parsed arguments and returning the exit
status. A mistake in a scenario, an override or a model setting is one line on stderr and exit
status 2, with no traceback; nothing runs.

Nothing that loads NumPy is imported before the arguments are read: `profile` and `validate`
first set the BLAS thread count their profile is (or will be) measured with
(`profiling/threads.py`), which BLAS reads once, when NumPy loads.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path

from .profiling import threads

DEFAULT_SCENARIO = "static-vs-continuous"  # scenarios.DEFAULT_SCENARIO, without loading it
USAGE_ERROR = 2


class UsageError(ValueError):
    """A command-line value that cannot be used; printed as one line."""


def cmd_run(args) -> int:
    import reports
    import scenarios

    from .runner import check_scenario
    from .validation.machine import note_foreign_profiles

    scenario = scenarios.load(args.scenario, args.set or ())
    check_scenario(scenario)
    for note in note_foreign_profiles(scenario):
        print(note, file=sys.stderr)
    out_dir = Path(args.out) if args.out else Path("out") / scenario.name
    worker = reports.ChartWorker.start()  # imports the chart code while we simulate
    try:
        results = _run_all(scenario, show=not args.quiet)
        if results is None:
            return 1
        files = reports.write_report(scenario, results, out_dir, worker)
    finally:
        if worker is not None:
            worker.close()
    print(reports.summary_text(results, files.summaries))
    print(f"\n{len(files.files)} files written to {out_dir}/; report: {files.html}")
    return 0


def _run_all(scenario, show: bool):
    """[(RunSpec, RunRecorder)] of every run, or None after printing why one failed."""
    from .runner import run_config

    runs = scenario.runs()
    results = []
    for index, spec in enumerate(runs, start=1):
        if show:
            print(f"[{index}/{len(runs)}] {scenario.name}: {spec.label}", file=sys.stderr)
        try:
            recorder = run_config(spec.config, progress=show, base_dir=Path(scenario.path).parent)
        except (ValueError, FileNotFoundError) as exc:  # e.g. a malformed row in a trace file
            print(f"servesim: error: {scenario.name}, run {spec.label}: {exc}", file=sys.stderr)
            return None
        results.append((spec, recorder))
    return results


def cmd_scenarios(args) -> int:
    import scenarios

    for name, description in scenarios.list_builtin():
        default = " (default)" if name == scenarios.DEFAULT_SCENARIO else ""
        print(f"{name}{default}")
        print(textwrap.indent(textwrap.fill(description, 92), "    "))
    return 0


def cmd_profile(args) -> int:
    model = model_config(args.model or ())
    from .profiling.profiler import profile_engine

    out = Path(args.out) if args.out else Path("out") / "profile.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    profile = profile_engine(model, out, quick=args.quick, progress=not args.quiet,
                             method=args.method)
    held = profile["fit"]["held_out"]
    print(f"profiled in {profile['machine']['profiling_s']:.0f} s with "
          f"{profile['fingerprint']['blas_threads']} BLAS thread(s); held-out step error "
          f"median {100 * held['median_abs_rel_error']:.1f}%")
    print(f"profile written to {out} (and cached for `servesim validate --profile auto`); use "
          f"it with  --set cost.profile={out}")
    return 0


def cmd_validate(args) -> int:
    import scenarios
    from scenarios import ScenarioError

    from .validation import validate

    scenario = scenarios.load(args.scenario, args.set or ())
    out_dir = Path(args.out) if args.out else Path("out") / f"{scenario.name}-validate"
    try:
        result = validate(scenario, out_dir, progress=not args.quiet, calibrate=args.calibrate,
                          profile=args.profile)
    except (ValueError, FileNotFoundError) as exc:  # ScenarioError is handled by main()
        if isinstance(exc, ScenarioError):
            raise
        print(f"servesim: error: {scenario.name}: {exc}", file=sys.stderr)
        return 1
    print(result.text())
    print(f"\nvalidation written to {out_dir}/")
    return 0


def model_config(pairs):
    """A ModelConfig from the defaults and KEY=VALUE pairs (--model d_model=256 ...)."""
    from dataclasses import fields

    from engine.model import ModelConfig
    from scenarios.overrides import parse_value

    allowed = [f.name for f in fields(ModelConfig)]
    values = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or key not in allowed:
            raise UsageError(f"--model {pair}: expected KEY=VALUE with KEY one of "
                             f"{', '.join(allowed)}")
        values[key] = parse_value(text)
    try:
        return ModelConfig(**values)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"--model: {exc}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="servesim", description="Simulate an LLM inference server whose step costs come "
                                     "from a real NumPy inference engine.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run = sub.add_parser("run", help="run a scenario and write its report")
    run.add_argument("scenario", nargs="?", default=DEFAULT_SCENARIO,
                     help=f"built-in name or TOML path (default: {DEFAULT_SCENARIO})")
    _add_common(run, "output directory (default: out/<scenario name>/)")
    run.set_defaults(func=cmd_run)
    listing = sub.add_parser("scenarios", help="list the built-in scenarios")
    listing.set_defaults(func=cmd_scenarios)
    profile = sub.add_parser("profile", help="profile the real engine and fit the step-cost model")
    profile.add_argument("--model", nargs="+", metavar="KEY=VALUE",
                         help="model shape, e.g. d_model=256 n_layers=2 (default: the default model)")
    profile.add_argument("--out", metavar="FILE", help="profile JSON (default: out/profile.json)")
    profile.add_argument("--quick", action="store_true",
                         help="serve a sixth of the requests (under 30 s, a rougher fit)")
    profile.add_argument("--threads", type=int, metavar="N",
                         help=f"BLAS threads to measure with (default: {threads.DEFAULT_THREADS},"
                              f" or the count set in the environment)")
    profile.add_argument("--method", choices=("served", "grid"), default="served",
                         help="fit steps served in the real loop (default), or the isolated "
                              "grid of the first profiler")
    profile.add_argument("--quiet", action="store_true", help="no progress bar")
    profile.set_defaults(func=cmd_profile)
    validate = sub.add_parser("validate", help="compare simulate mode with real serving")
    validate.add_argument("scenario", help="built-in name or TOML path")
    _add_common(validate, "output directory (default: out/<scenario name>-validate/)")
    validate.add_argument("--profile", default="auto", metavar="auto|NAME|PATH",
                          help="the profile the simulation uses: auto (default) profiles this "
                               "machine once and reuses it from the cache; a shipped name or a "
                               "path must have been measured on this machine")
    validate.add_argument("--calibrate", action="store_true",
                          help="scale the simulation to the machine's speed measured just "
                               "before serving (the profile's reference step)")
    validate.set_defaults(func=cmd_validate)
    return parser


def _add_common(parser, out_help: str) -> None:
    parser.add_argument("--out", metavar="DIR", help=out_help)
    parser.add_argument("--set", action="extend", nargs="+", metavar="KEY=VALUE",
                        help="override a dotted key, e.g. workload.arrival.rate=8 (repeatable; "
                             "values are TOML)")
    parser.add_argument("--quiet", action="store_true", help="no progress output")


def set_threads(args) -> None:
    """Before NumPy loads: the BLAS thread count `profile` measures with (--threads, default 1)
    and `validate` serves with (its profile's; auto: the default). A count already set in the
    environment stays. Where NumPy is already loaded (a Python caller), nothing can change."""
    if "numpy" in sys.modules:
        return
    if args.command == "profile":
        threads.apply(args.threads or threads.DEFAULT_THREADS)
    elif args.command == "validate":
        recorded = None if args.profile == "auto" else threads.recorded(args.profile)
        threads.apply(recorded or threads.DEFAULT_THREADS)


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "profile" and args.threads is not None and args.threads < 1:
        print("servesim: error: --threads must be a positive integer", file=sys.stderr)
        return USAGE_ERROR
    set_threads(args)
    from scenarios import ScenarioError

    try:
        return args.func(args)
    except (ScenarioError, UsageError) as exc:
        print(f"servesim: error: {exc}", file=sys.stderr)
        return USAGE_ERROR


if __name__ == "__main__":
    sys.exit(main())
