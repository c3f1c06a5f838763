"""`servesim run`: simulate every run of a scenario (serially, on a process pool or on Ray) and
write its report.
"""

from __future__ import annotations

import sys
from pathlib import Path

from .common import (DEFAULT_SCENARIO, RunFailed, add_common_flags, add_parallel_flags,
                     load_scenario, manifest, output_dir, parallel_of, progress_lines)
from .flags import add_workload_flags
from .result_flags import add_result_flags, result_percentiles


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("run", help="run a scenario and write its report")
    parser.add_argument("scenario", nargs="?", default=DEFAULT_SCENARIO,
                        help=f"built-in name or TOML path (default: {DEFAULT_SCENARIO})")
    add_common_flags(parser, "output directory (default: out/<scenario name>/)")
    add_workload_flags(parser)
    add_result_flags(parser)
    add_parallel_flags(parser, "runs")
    parser.set_defaults(func=cmd_run)


def cmd_run(args) -> int:
    import reports
    from reports.output import output_folder

    from ..checks import check_scenario
    from ..runner import run_notes
    from ..validation.machine import note_foreign_profiles

    scenario = load_scenario(args)
    check_scenario(scenario)
    parallel = parallel_of(args)
    args.out_dir = out_dir = output_dir(args.out, scenario.name)
    for note in note_foreign_profiles(scenario) + run_notes(scenario):
        print(note, file=sys.stderr)
    percentiles = result_percentiles(args)
    with output_folder(out_dir, manifest("run", scenario) | percentiles.record()) as folder:
        worker = reports.ChartWorker.start()  # imports the chart code while we simulate
        try:
            results = _run_all(scenario, parallel, show=not args.quiet)
            files = reports.write_report(scenario, results, folder, worker,
                                         percentiles=percentiles)
        except BaseException:  # interrupted or failed: the charts are not wanted any more
            if worker is not None:
                worker.kill()
            raise
        finally:
            if worker is not None:
                worker.close()
    print(reports.summary_text(results, files.summaries))
    rejected = reports.rejection_text(results)
    if rejected:  # why, in a line a kind of reason (requests.csv has each request's)
        print(f"\n{rejected}")
    print(f"\n{len(files.files) + 1} files written to {out_dir}/; report: "
          f"{out_dir / files.html.name}")
    return 0


def _run_all(scenario, parallel, show: bool) -> list:
    """[(RunSpec, RunRecorder)] of every run (the spec as run: `sim.build.resolved_spec`), in
    `Scenario.runs()` order however they ran; RunFailed when one cannot finish."""
    from ..parallel import run_config_job, run_jobs
    from ..build import resolved_spec
    from ..runner import run_config

    runs = scenario.runs()
    if parallel.ray or parallel.worker_count(len(runs)) > 1:
        if show:
            print(f"{scenario.name}: {len(runs)} runs on {parallel.describe(len(runs))}",
                  file=sys.stderr)
        jobs = [(spec.config, Path(scenario.path).parent) for spec in runs]
        try:
            recorders = run_jobs(run_config_job, jobs, parallel,
                                 progress_lines(scenario.name, runs, show))
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
