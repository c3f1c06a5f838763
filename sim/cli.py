"""The `servesim` command line.

    servesim run [SCENARIO] [--out DIR] [--set KEY=VALUE ...] [--quiet] [--jobs N] [--ray]
    servesim search SCENARIO [--out DIR] [--set KEY=VALUE ...] [--jobs N] [--ray]
    servesim scenarios
    servesim profile [--model KEY=VALUE ...] [--out FILE] [--quick] [--threads N]
    servesim validate SCENARIO [--out DIR] [--profile auto|NAME|PATH] [--calibrate] [--jobs N]
                      [--against URL]
    servesim bench URL [SCENARIO] [--out DIR] [--endpoint PATH] [--max-concurrency N] ...
    servesim serve [SCENARIO] [--host H] [--port P] [--set KEY=VALUE ...] [--variant NAME]
                   [--max-waiting N]

Each subcommand is one `cmd_*` function taking the parsed arguments and returning the exit
status. A mistake in a scenario, an override or a model setting is one line on stderr and exit
status 2, with no traceback; nothing runs. `run` and `search` run their simulations serially,
on a process pool or on Ray (`--jobs`, `--ray`, `--ray-address`: `sim/parallel.py`), and so does
`validate` when asked (by default it serves one run at a time: servings side by side on one
machine slow each other down).

Nothing that loads NumPy is imported before the arguments are read: `profile` and `validate`
first set the BLAS thread count their profile is (or will be) measured with
(`profiling/threads.py`), which BLAS reads once, when NumPy loads.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

from .profiling import threads

DEFAULT_SCENARIO = "static-vs-continuous"  # scenarios.DEFAULT_SCENARIO, without loading it
USAGE_ERROR = 2


class UsageError(ValueError):
    """A command-line value that cannot be used; printed as one line."""


class RunFailed(RuntimeError):
    """A run that started could not finish (its data was bad); printed as one line, status 1."""


class Terminated(BaseException):
    """SIGTERM or SIGHUP (the terminal closed), raised where the process is, so every cleanup
    runs as for Ctrl-C."""


STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def cmd_run(args) -> int:
    import reports
    from reports.output import output_folder

    from .runner import check_scenario, run_notes
    from .validation.machine import note_foreign_profiles

    scenario = load_scenario(args)
    check_scenario(scenario)
    parallel = parallel_of(args)
    args.out_dir = out_dir = output_dir(args.out, scenario.name)
    for note in note_foreign_profiles(scenario) + run_notes(scenario):
        print(note, file=sys.stderr)
    with output_folder(out_dir, manifest("run", scenario)) as folder:
        worker = reports.ChartWorker.start()  # imports the chart code while we simulate
        try:
            results = _run_all(scenario, parallel, show=not args.quiet)
            files = reports.write_report(scenario, results, folder, worker)
        except BaseException:  # interrupted or failed: the charts are not wanted any more
            if worker is not None:
                worker.kill()
            raise
        finally:
            if worker is not None:
                worker.close()
    print(reports.summary_text(results, files.summaries))
    print(f"\n{len(files.files) + 1} files written to {out_dir}/; report: "
          f"{out_dir / files.html.name}")
    return 0


def load_scenario(args):
    """The scenario named on the command line, with its --set overrides, then the vLLM-style
    flags (`cli_flags.py`) as overrides and a sweep. A key that both an override and the
    scenario's sweep set is refused, naming both."""
    import scenarios

    from .cli_flags import FlagError, flag_overrides

    sets = list(args.set or ())

    def workload_of(pairs) -> dict:
        return scenarios.load(args.scenario, sets + pairs).base["workload"]

    try:
        pairs, sweep, flags = flag_overrides(args, workload_of)
    except FlagError as exc:
        raise UsageError(str(exc)) from None
    scenario = scenarios.load(args.scenario, sets + pairs, sweep=sweep, sources=flags)
    variant = getattr(args, "variant", None)
    return scenario if variant is None else only_variant(scenario, variant)


def only_variant(scenario, name: str):
    """The scenario with one of its variants (--variant NAME), or UsageError naming them."""
    if name not in scenario.variant_names:
        raise UsageError(f"--variant {name}: the scenario's variants are "
                         f"{', '.join(scenario.variant_names)}")
    return replace(scenario, variants=tuple(v for v in scenario.variants if v.name == name),
                   specs=tuple(s for s in scenario.specs if s.variant == name))


def output_dir(out, name: str, suffix: str = "") -> Path:
    """--out, or out/<scenario name><suffix> when the name is a plain folder name; refused now,
    before any work, where the command could not write its folder (`reports.output`)."""
    from reports.output import check_place, is_plain_name

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
    """What a command's output folder records of what was run."""
    return {"servesim": version(), "command": command, "scenario": scenario.name,
            "seed": scenario.seed, "overrides": [f"{k}={v!r}" for k, v in scenario.overrides]}


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as package_version

    try:
        return package_version("servesim")
    except PackageNotFoundError:
        return "unknown"


def parallel_of(args):
    """The `sim.parallel.Parallel` that --jobs, --ray and --ray-address ask for."""
    from .parallel import Parallel

    try:
        return Parallel(args.jobs, args.ray or args.ray_address is not None, args.ray_address)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _run_all(scenario, parallel, show: bool) -> list:
    """[(RunSpec, RunRecorder)] of every run (the spec as run: `runner.resolved_spec`), in
    `Scenario.runs()` order however they ran; RunFailed when one cannot finish."""
    from .parallel import run_config_job, run_jobs
    from .runner import resolved_spec, run_config

    runs = scenario.runs()
    if parallel.ray or parallel.worker_count(len(runs)) > 1:
        if show:
            print(f"{scenario.name}: {len(runs)} runs on {parallel.describe(len(runs))}",
                  file=sys.stderr)
        jobs = [(spec.config, Path(scenario.path).parent) for spec in runs]
        try:
            recorders = run_jobs(run_config_job, jobs, parallel,
                                 _progress(scenario.name, runs, show))
        except (ValueError, FileNotFoundError) as exc:
            raise RunFailed(f"{scenario.name}: {exc}") from None
        return [(resolved_spec(spec), recorder) for spec, recorder in zip(runs, recorders)]
    results = []
    for index, spec in enumerate(runs, start=1):
        if show:
            print(f"[{index}/{len(runs)}] {scenario.name}: {spec.label}", file=sys.stderr)
        try:
            recorder = run_config(spec.config, progress=show, base_dir=Path(scenario.path).parent)
        except (ValueError, FileNotFoundError) as exc:  # e.g. a malformed row in a trace file
            raise RunFailed(f"{scenario.name}, run {spec.label}: {exc}") from None
        results.append((resolved_spec(spec), recorder))
    return results


def _progress(name: str, specs, show: bool, describe=None):
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


def cmd_search(args) -> int:
    from reports.output import output_folder
    from reports.search_report import search_text, write_search_report

    from .search import search, search_scenario

    scenario = search_scenario(load_scenario(args))
    parallel = parallel_of(args)
    args.out_dir = out_dir = output_dir(args.out, scenario.name, "-search")
    specs = scenario.runs()
    if not args.quiet:
        print(f"{scenario.name}: searching {len(specs)} points on "
              f"{parallel.describe(len(specs))}", file=sys.stderr)
    with output_folder(out_dir, manifest("search", scenario)) as folder:
        try:
            result = search(scenario, parallel,
                            _progress(scenario.name, specs, not args.quiet, _capacity_text))
        except (ValueError, FileNotFoundError) as exc:
            raise RunFailed(f"{scenario.name}: {exc}") from None
        files = write_search_report(result, folder)
    print(search_text(result))
    print(f"\n{len(files) + 1} files written to {out_dir}/; report: {out_dir / 'report.html'}")
    return 0


def _capacity_text(probes) -> str:
    """A point's bisection in a few words, for the progress lines."""
    met = [probe.rate for probe in probes if probe.meets]
    if not met:
        return f"fails at {probes[0].rate:g} requests/s"
    bound = "at least " if len(probes) > 1 and probes[1].meets else ""
    return f"{bound}{max(met):.3g} requests/s ({len(probes)} simulations)"


def cmd_scenarios(args) -> int:
    import scenarios

    for name, description in scenarios.list_builtin():
        default = " (default)" if name == scenarios.DEFAULT_SCENARIO else ""
        print(f"{name}{default}")
        print(textwrap.indent(textwrap.fill(description, 92), "    "))
    return 0


def cmd_profile(args) -> int:
    model = model_config(args.model or ())
    check_profile_memory(model)
    from reports.output import check_writable_file

    from .profiling.profiler import profile_engine
    from .profiling.workloads import longest_request

    if args.method == "served" and model.max_seq_len < longest_request():
        raise UsageError(f"--model max_seq_len: profiling serves requests of up to "
                         f"{longest_request():,} tokens, so the model's max_seq_len must be at "
                         f"least that, got {model.max_seq_len}")
    out = Path(args.out) if args.out else Path("out") / "profile.json"
    from .costs.profile_file import is_profile_text

    check_writable_file(out, is_profile_text)  # before minutes of profiling
    profile = profile_engine(model, out, quick=args.quick, progress=not args.quiet,
                             method=args.method)
    held = profile["fit"]["held_out"]
    print(f"profiled in {profile['machine']['profiling_s']:.0f} s with "
          f"{profile['fingerprint']['blas_threads']} BLAS thread(s); held-out step error "
          f"median {100 * held['median_abs_rel_error']:.1f}%")
    from .profiling import cache

    kept = args.quick and cache.holds_full(profile["fingerprint_key"])
    where = ("the full profile cached earlier is kept for `servesim validate --profile auto`"
             if kept else "and cached for `servesim validate --profile auto`")
    print(f"profile written to {out} ({where}); use it with --set cost.profile={out}")
    return 0


def check_profile_memory(model) -> None:
    """The model's weights and the largest KV cache the profiler serves must fit in memory
    (`sim.memory`), before either is allocated."""
    from dataclasses import asdict

    from scenarios import DEFAULTS

    from .memory import check_engine_memory
    from .profiling.workloads import HELD_OUT, TRAIN

    engine = DEFAULTS["engine"]
    blocks = max(w.engine.get("num_kv_blocks", engine["num_kv_blocks"]) for w in TRAIN + HELD_OUT)
    try:
        check_engine_memory({"mode": "serve", "model": asdict(model), "engine": {
            "num_kv_blocks": blocks, "block_size": engine["block_size"]}}, "profiling")
    except ValueError as exc:
        raise UsageError(f"--model: {exc}") from None


def cmd_validate(args) -> int:
    import scenarios

    from .validation import validate

    if args.against is not None:
        from .cli_http import validate_against_cmd

        return validate_against_cmd(args)
    scenario = load_scenario(args)
    args.out_dir = out_dir = output_dir(args.out, scenario.name, "-validate")
    parallel = parallel_of(args)
    if args.jobs is None and not parallel.ray:  # real-time servings side by side disturb
        parallel = replace(parallel, workers=1)  # each other's timing: one at a time
    try:
        result = validate(scenario, out_dir, progress=not args.quiet, calibrate=args.calibrate,
                          profile=args.profile, manifest=manifest("validate", scenario),
                          parallel=parallel)
    except (ValueError, FileNotFoundError) as exc:
        if isinstance(exc, scenarios.ScenarioError):
            raise
        raise RunFailed(f"{scenario.name}: {exc}") from None
    print(result.text())  # ends with the report's path
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


class Parser(argparse.ArgumentParser):
    """argparse with its errors as the project's one line (and status 2)."""

    def error(self, message: str):
        self.exit(USAGE_ERROR, f"servesim: error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    from .cli_flags import add_workload_flags
    from .cli_http import add_client_flags, cmd_bench, cmd_serve

    parser = Parser(
        prog="servesim", description="Simulate an LLM inference server whose step costs come "
                                     "from a real NumPy inference engine.")
    parser.add_argument("--version", action="version", version=f"servesim {version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                parser_class=Parser)
    run = sub.add_parser("run", help="run a scenario and write its report")
    run.add_argument("scenario", nargs="?", default=DEFAULT_SCENARIO,
                     help=f"built-in name or TOML path (default: {DEFAULT_SCENARIO})")
    _add_common(run, "output directory (default: out/<scenario name>/)")
    add_workload_flags(run)
    _add_parallel(run, "runs")
    run.set_defaults(func=cmd_run)
    search = sub.add_parser("search", help="find the highest arrival rate that meets the SLOs, "
                                           "for every point of a grid")
    search.add_argument("scenario", help="built-in name or TOML path, with a [search] table")
    _add_common(search, "output directory (default: out/<scenario name>-search/)")
    add_workload_flags(search)
    _add_parallel(search, "grid points")
    search.set_defaults(func=cmd_search)
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
    _add_common(validate, "output directory (default: out/<scenario name>-validate/)",
                "validate this variant only (default: every variant; with --against, "
                "required when there are several: the server runs one of them)")
    add_workload_flags(validate)
    validate.add_argument("--profile", default="auto", metavar="auto|NAME|PATH",
                          help="the profile the simulation uses: auto (default) profiles this "
                               "machine once and reuses it from the cache; a shipped name or a "
                               "path must have been measured on this machine")
    validate.add_argument("--calibrate", action="store_true",
                          help="scale the simulation to the machine's speed measured just "
                               "before serving (the profile's reference step)")
    _add_parallel(validate, "runs", default="1: servings share no cores")
    validate.add_argument("--against", metavar="URL",
                          help="bench the OpenAI-compatible server at URL with the scenario's "
                               "requests instead of serving them in-process")
    add_client_flags(validate)
    validate.set_defaults(func=cmd_validate)
    bench = sub.add_parser("bench", help="replay a scenario's requests against an "
                                         "OpenAI-compatible server and write the report")
    bench.add_argument("url", help="the server's base URL, e.g. http://127.0.0.1:8000")
    bench.add_argument("scenario", nargs="?", default=DEFAULT_SCENARIO,
                       help=f"built-in name or TOML path (default: {DEFAULT_SCENARIO})")
    _add_common(bench, "output directory (default: out/<scenario name>-bench/)")
    add_workload_flags(bench)
    add_client_flags(bench)
    bench.set_defaults(func=cmd_bench)
    serve = sub.add_parser("serve", help="serve a scenario's engine behind an OpenAI-compatible "
                                         "HTTP API")
    serve.add_argument("scenario", nargs="?",
                       help=f"built-in name or TOML path (default: {DEFAULT_SCENARIO}, its "
                            f"continuous variant)")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on "
                                                           "(default: 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="port (default: 8000; 0: any free)")
    serve.add_argument("--set", action="extend", nargs="+", metavar="KEY=VALUE",
                       help="override a dotted key, e.g. model.n_layers=1 (repeatable; values "
                            "are TOML)")
    serve.add_argument("--variant", metavar="NAME",
                       help="the scenario variant whose settings are served (default: the "
                            "first of a named scenario)")
    serve.add_argument("--max-waiting", type=int, metavar="N",
                       help="answer 429 while N requests wait for admission (default: no limit)")
    serve.set_defaults(func=cmd_serve)
    return parser


def _add_common(parser, out_help: str, variant_help: str = "run this variant only (default: "
                                                            "every variant)") -> None:
    parser.add_argument("--out", metavar="DIR", help=out_help)
    parser.add_argument("--variant", metavar="NAME", help=variant_help)
    parser.add_argument("--set", action="extend", nargs="+", metavar="KEY=VALUE",
                        help="override a dotted key, e.g. workload.arrival.rate=8 (repeatable; "
                             "values are TOML)")
    parser.add_argument("--quiet", action="store_true", help="no progress output")


def _add_parallel(parser, what: str, default: str | None = None) -> None:
    default = default or f"as many as there are CPUs and {what}"
    parser.add_argument("--jobs", type=int, metavar="N",
                        help=f"run the {what} on N processes (1: one after the other; default: "
                             f"{default}), or a local Ray of N CPUs with --ray")
    parser.add_argument("--ray", action="store_true",
                        help=f"run the {what} on Ray: a local Ray started for the command, or "
                             f"the cluster at RAY_ADDRESS (needs pip install "
                             f"\"servesim[ray]\")")
    parser.add_argument("--ray-address", metavar="ADDR",
                        help="run on the running Ray cluster at ADDR (implies --ray)")


def set_threads(args) -> None:
    """Before NumPy loads: the BLAS thread count `profile` measures with (--threads, default 1)
    and `validate` serves with (its profile's; auto: the default). `serve` uses one: its engine
    steps one batch at a time, and BLAS threads spinning beside it on a shared machine slow
    every step down severalfold (docs/server/http.md). A count already set in the environment
    stays. Where NumPy is already loaded (a Python caller), nothing can change."""
    if "numpy" in sys.modules:
        return
    if args.command == "profile":
        threads.apply(args.threads or threads.DEFAULT_THREADS)
    elif args.command == "validate":
        recorded = None if args.profile == "auto" else threads.recorded(args.profile)
        threads.apply(recorded or threads.DEFAULT_THREADS)
    elif args.command == "serve":
        threads.apply(threads.DEFAULT_THREADS)


def main(argv=None) -> int:
    """Run one command; its exit status. Every failure a user can cause, an interruption at any
    point included, is one line on stderr and a non-zero status, never a traceback."""
    previous = {sig: signal.signal(sig, _terminate) for sig in STOP_SIGNALS}
    args = None
    try:
        argv = _split_set_values(list(sys.argv[1:] if argv is None else argv))
        args = build_parser().parse_args(argv)
        if args.command == "profile" and args.threads is not None and args.threads < 1:
            raise UsageError("--threads must be a positive integer")
        set_threads(args)
        return _run_command(args)
    except KeyboardInterrupt:
        return _fail(f"interrupted{_kept(args)}", 130, prefix="servesim: ")
    except Terminated:
        return _fail(f"terminated{_kept(args)}", 143, prefix="servesim: ")
    except UsageError as exc:
        return _fail(str(exc), USAGE_ERROR)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _split_set_values(argv: list[str]) -> list[str]:
    from .cli_flags import split_set_values

    return split_set_values(argv)


def _run_command(args) -> int:
    """The command's status, with the errors it can meet turned into one line."""
    from reports.chart_worker import ChartsFailed
    from reports.output import OutputError
    from scenarios import ScenarioError

    try:
        return args.func(args)
    except (ScenarioError, UsageError, OutputError) as exc:
        return _fail(str(exc), USAGE_ERROR)
    except (RunFailed, ChartsFailed) as exc:
        return _fail(f"{exc}{_kept(args) if isinstance(exc, ChartsFailed) else ''}", 1)
    except BrokenPipeError:  # whoever read the output stopped (`| head`): what is written stays
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit
        return 141  # 128 + SIGPIPE, as a shell tool killed by the closed pipe
    except OSError as exc:  # a file system fault: unwritable, full, a file where a folder goes
        where = exc.filename or getattr(args, "out_dir", None)
        problem = f"{exc.strerror or exc}{_kept(args)}"
        return _fail(f"{where}: {problem}" if where else problem, 1)
    except MemoryError:
        return _fail(f"out of memory{_kept(args)}; make the run smaller (fewer requests, "
                     f"variants or sweep points)", 1)


def _fail(message: str, status: int, prefix: str = "servesim: error: ") -> int:
    print(f"{prefix}{message}", file=sys.stderr)
    return status


def _kept(args) -> str:
    """What an interrupted or failed command left: nothing new, and any earlier output whole."""
    out_dir = getattr(args, "out_dir", None)
    try:
        earlier = out_dir is not None and Path(out_dir).is_dir()
    except OSError:  # a path the file system cannot even look up
        earlier = False
    if earlier:
        return f"; nothing written, the earlier output in {out_dir}/ is kept whole"
    return "; nothing written"


def _terminate(signum, frame):
    raise Terminated()


if __name__ == "__main__":  # python -m sim.cli: run the `sim.cli` module the commands import,
    from sim.cli import main as cli_main  # so that the errors they raise are the ones caught

    sys.exit(cli_main())
