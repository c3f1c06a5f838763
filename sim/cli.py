"""The `servesim` command line.

    servesim run [SCENARIO] [--out DIR] [--set KEY=VALUE ...] [--quiet]
    servesim scenarios
    servesim profile [--model KEY=VALUE ...] [--out FILE] [--quick]
    servesim validate SCENARIO [--out DIR] [--calibrate]

Each subcommand is one `cmd_*` function taking the parsed arguments and returning the exit
status. A mistake in a scenario, an override or a model setting is one line on stderr and exit
status 2, with no traceback; nothing runs.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from dataclasses import fields
from pathlib import Path

import scenarios
from engine.model import ModelConfig
from scenarios import ScenarioError
from scenarios.overrides import parse_value

USAGE_ERROR = 2


class UsageError(ValueError):
    """A command-line value that cannot be used; printed as one line."""


def cmd_run(args) -> int:
    import reports

    from .runner import check_scenario

    scenario = scenarios.load(args.scenario, args.set or ())
    check_scenario(scenario)
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
    for name, description in scenarios.list_builtin():
        default = " (default)" if name == scenarios.DEFAULT_SCENARIO else ""
        print(f"{name}{default}")
        print(textwrap.indent(textwrap.fill(description, 92), "    "))
    return 0


def cmd_profile(args) -> int:
    model = model_config(args.model or ())
    from .profiling import profile_engine

    out = Path(args.out) if args.out else Path("out") / "profile.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    profile_engine(model, out, quick=args.quick, progress=not args.quiet)
    print(f"profile written to {out}; use it with  --set cost.profile={out}")
    return 0


def cmd_validate(args) -> int:
    from .validation import validate

    scenario = scenarios.load(args.scenario, args.set or ())
    out_dir = Path(args.out) if args.out else Path("out") / f"{scenario.name}-validate"
    try:
        result = validate(scenario, out_dir, progress=not args.quiet, calibrate=args.calibrate)
    except (ValueError, FileNotFoundError) as exc:  # ScenarioError is handled by main()
        if isinstance(exc, ScenarioError):
            raise
        print(f"servesim: error: {scenario.name}: {exc}", file=sys.stderr)
        return 1
    print(result.text())
    print(f"\nvalidation written to {out_dir}/")
    return 0


def model_config(pairs) -> ModelConfig:
    """A ModelConfig from the defaults and KEY=VALUE pairs (--model d_model=256 ...)."""
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
    run.add_argument("scenario", nargs="?", default=scenarios.DEFAULT_SCENARIO,
                     help=f"built-in name or TOML path (default: {scenarios.DEFAULT_SCENARIO})")
    _add_common(run, "output directory (default: out/<scenario name>/)")
    run.set_defaults(func=cmd_run)
    listing = sub.add_parser("scenarios", help="list the built-in scenarios")
    listing.set_defaults(func=cmd_scenarios)
    profile = sub.add_parser("profile", help="profile the real engine and fit the step-cost model")
    profile.add_argument("--model", nargs="+", metavar="KEY=VALUE",
                         help="model shape, e.g. d_model=256 n_layers=2 (default: the default model)")
    profile.add_argument("--out", metavar="FILE", help="profile JSON (default: out/profile.json)")
    profile.add_argument("--quick", action="store_true", help="a small grid (seconds, rougher fit)")
    profile.add_argument("--quiet", action="store_true", help="no progress bar")
    profile.set_defaults(func=cmd_profile)
    validate = sub.add_parser("validate", help="compare simulate mode with real serving")
    validate.add_argument("scenario", help="built-in name or TOML path")
    _add_common(validate, "output directory (default: out/<scenario name>-validate/)")
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


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ScenarioError, UsageError) as exc:
        print(f"servesim: error: {exc}", file=sys.stderr)
        return USAGE_ERROR


if __name__ == "__main__":
    sys.exit(main())
