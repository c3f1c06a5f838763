"""What every `servesim` command shares: its errors, the scenario it loads (with --set, the
workload flags and --variant), its output folder and manifest, the parallel backend it runs on
(--jobs, --ray, --ray-address) and its progress lines.

Nothing here imports NumPy at module level: the command line reads its arguments and sets the
BLAS thread count before anything loads NumPy (`sim/profiling/threads.py`).
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

from .flag_types import FlagError, positive_integer
from .flag_values import sweep_flags
from .flags import flag_overrides

DEFAULT_SCENARIO = "static-vs-continuous"  # scenarios.DEFAULT_SCENARIO, without loading it
SERVE_VARIANT = "continuous"  # the default scenario's variant `serve` serves, `bench` labels
USAGE_ERROR = 2


class UsageError(ValueError):
    """A command-line value that cannot be used; printed as one line."""


class RunFailed(RuntimeError):
    """A run that started could not finish (its data was bad); printed as one line, status 1."""


class Terminated(BaseException):
    """SIGTERM or SIGHUP (the terminal closed), raised where the process is, so every cleanup
    runs as for Ctrl-C."""


STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def load_scenario(args):
    """The scenario named on the command line, with its --set overrides, then the vLLM-style
    flags (`flags.py`) as overrides and a sweep, and with --variant that variant alone. A key
    that both an override and the scenario's sweep set is refused, naming both."""
    import scenarios

    sets = list(args.set or ())
    variant = getattr(args, "variant", None)

    def scenario_of(pairs, sources):  # with --sweep: what a run reads may change with it
        return scenarios.load(args.scenario, sets + pairs, sweep=flag_sweep, sources=sources,
                              variant=variant)

    try:
        flag_sweep = sweep_flags(args.sweep or ())
        pairs, sweep, flags = flag_overrides(args, scenario_of)
    except FlagError as exc:
        raise UsageError(str(exc)) from None
    return scenarios.load(args.scenario, sets + pairs, sweep=sweep, sources=flags,
                          variant=variant)


def output_dir(out, name: str, suffix: str = "") -> Path:
    """--out, or out/<scenario name><suffix> when the name is a plain folder name; refused now,
    before any work, where the command could not write its folder (`reports.places`)."""
    from reports.places import check_place, is_plain_name

    if out is not None:
        if not out.strip():
            raise UsageError("--out: an empty path; give a folder, e.g. --out results")
        path = Path(out)
    elif not is_plain_name(name):
        raise UsageError(f"the scenario's name {name!r} cannot name its output folder (letters, "
                         f"digits, '-', '_' and '.' only); give --out")
    else:
        path = Path("out") / f"{name}{suffix}"
    check_place(path)
    return path


def manifest(command: str, scenario) -> dict:
    """What a command's output folder records of what was run: the scenario, its seed, the
    variants run and the sweep (the file's and --sweep's), and the overrides (--set and the
    flags) as `--set` takes them."""
    from scenarios.overrides import toml_text

    return {"servesim": version(), "command": command, "scenario": scenario.name,
            "seed": scenario.seed, "variants": scenario.variant_names,
            "sweep": {key: list(values) for key, values in scenario.sweep.items()},
            "overrides": [f"{k}={toml_text(v)}" for k, v in scenario.overrides]}


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as package_version

    try:
        return package_version("servesim")
    except PackageNotFoundError:
        return "unknown"


def parallel_of(args):
    """The `sim.parallel.Parallel` that --jobs, --ray and --ray-address ask for."""
    from ..parallel import Parallel

    try:
        return Parallel(args.jobs, args.ray or args.ray_address is not None, args.ray_address)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def progress_lines(name: str, specs, show: bool, describe=None):
    """A `run_jobs` callback printing "[done/total] name: label" as each job ends (with
    `describe(result)` after it), or None when quiet."""
    if not show:
        return None
    finished = []

    def done(index: int, result) -> None:
        finished.append(index)
        what = f": {describe(result)}" if describe else " done"
        print(f"[{len(finished)}/{len(specs)}] {name}: {specs[index].label}{what}",
              file=sys.stderr)

    return done


def add_common_flags(parser, out_help: str, variant_help: str = "run this variant only "
                                                                "(default: every variant)") -> None:
    """--out, --variant, --set and --quiet, as every command that loads a scenario has them."""
    parser.add_argument("--out", metavar="DIR", help=out_help)
    parser.add_argument("--variant", metavar="NAME", help=variant_help)
    parser.add_argument("--set", action="extend", nargs="+", metavar="KEY=VALUE",
                        help="override a dotted key, e.g. workload.num_requests=500 (repeatable; "
                             "values are TOML)")
    parser.add_argument("--quiet", action="store_true", help="no progress output")


def add_parallel_flags(parser, what: str, default: str | None = None) -> None:
    """--jobs, --ray and --ray-address (read by `parallel_of`)."""
    default = default or f"as many as there are CPUs and {what}"
    parser.add_argument("--jobs", type=positive_integer, metavar="N",
                        help=f"run the {what} on N processes (1: one after the other; default: "
                             f"{default}), or a local Ray of N CPUs with --ray")
    parser.add_argument("--ray", action="store_true",
                        help=f"run the {what} on Ray: a local Ray started for the command, or "
                             f"the cluster at RAY_ADDRESS (needs pip install "
                             f"\"servesim[ray]\")")
    parser.add_argument("--ray-address", metavar="ADDR",
                        help="run on the running Ray cluster at ADDR (implies --ray)")
