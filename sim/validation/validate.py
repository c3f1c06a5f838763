"""`servesim validate`: does the simulator predict what the real engine does?

Every run of a scenario (each variant at each sweep point) is run twice on the same requests
(one seed gives the same arrival times, prompt and output lengths in every mode):
- serve: the NumPy engine in real time on the wall clock (`engine.server.serve`), sampling with
  ignore_eos so every request generates exactly its planned output tokens;
- simulate: the engine's own scheduler on a SimPy clock, steps costed by the scenario's cost
  model (a fitted profile, or the linear model).

Written to `out_dir`: `validation.csv` (variant, metric, stat, serve, simulate, error_pct for
TTFT, TPOT, ITL, E2E x mean, p50, p90, p99), `validation_cdfs.png` (each metric's CDF, a
variant's served and simulated lines in one colour, solid and dashed), `report.md` and
`report.html` (the error table and the chart), `step_errors.csv` (every served step with the
cost model's prediction for its shape, see `steps.py`), and the usual report of each mode in
`serve/` and `simulate/`. On a terminal, a progress bar follows each real-time serving. A
diagnostic, `validation_speed_normalized.csv`, compares the served run with a simulation whose
step costs are all scaled by the served steps' total measured / predicted time: what remains is
error in how step cost depends on the step's shape and in the simulated dynamics, not the
machine's overall speed while serving.

    result = validate("kv-pressure", "out/kv-pressure-validate")
    print(result.text())
"""

from __future__ import annotations

import math
import sys
from dataclasses import replace
from pathlib import Path

import scenarios
from engine.benchmark import summarize

from ..costs import cost_model as build_cost_model
from ..costs.calibrate import ScaledCost, reference_of
from ..profiling.reference import measure_speed
from ..profiling.serving import serve_logged
from ..runner import run_config
from .result import Validation, ValidationRun
from .runs import validatable_runs
from .steps import speed_ratio, step_rows, write_steps_csv
from .table import display_rows, error_rows, write_csv


def validate(scenario, out_dir=None, progress: bool = False, write: bool = True,
             calibrate: bool = False, profile: str = "auto",
             manifest: dict | None = None, parallel=None) -> Validation:
    """Serve and simulate every run of `scenario` (a `scenarios.Scenario`, a built-in name or a
    path) and, with `write`, write the files listed in the module docstring to `out_dir`, whole
    or not at all (`reports.output.output_folder`, with `manifest` recorded). `profile`: for
    runs whose cost model is a profile, "auto" (this machine's, from the cache, profiled first
    where there is none) or a shipped name or path measured on this machine (`machine.py`).
    `calibrate`: scale the simulation's costs by the machine's speed measured just before each
    serving (`sim.costs.calibrate`; needs a profile that records its reference step).
    `parallel`: a `sim.parallel.Parallel` to run the runs on (default: one after the other,
    since real-time servings side by side on one machine slow each other down)."""
    from reports.output import output_folder

    if not isinstance(scenario, scenarios.Scenario):
        scenario = scenarios.load(scenario)
    specs = validatable_runs(scenario, calibrate, profile, progress)
    if not write:
        return _validate_runs(scenario, specs, None, progress, calibrate, parallel)
    if out_dir is None:
        raise ValueError("validate: out_dir is required to write the files")
    manifest = manifest or {"command": "validate", "scenario": scenario.name,
                            "seed": scenario.seed}
    with output_folder(out_dir, manifest) as folder:  # taken before anything is served
        result = _validate_runs(scenario, specs, Path(out_dir), progress, calibrate, parallel)
        write_outputs(result, folder)
    return result


def _validate_runs(scenario, specs, out_dir, progress: bool, calibrate: bool,
                   parallel=None) -> Validation:
    base_dir = Path(scenario.path).parent if scenario.path else None
    if parallel is not None and (parallel.ray or parallel.worker_count(len(specs)) > 1):
        return Validation(scenario, tuple(_validate_in_parallel(scenario, specs, base_dir,
                                                                calibrate, parallel, progress)),
                          out_dir)
    runs = []
    for index, spec in enumerate(specs, start=1):
        if progress:
            count = spec.config.workload.num_requests or "the trace's"
            print(f"[{index}/{len(specs)}] {scenario.name}: {spec.label}: serving {count} "
                  f"requests in real time", file=sys.stderr)
        runs.append(validate_run(spec, base_dir, calibrate, progress))
    return Validation(scenario, tuple(runs), out_dir)


def _validate_in_parallel(scenario, specs, base_dir, calibrate: bool, parallel,
                          progress: bool) -> list:
    """`validate_run` of every run as jobs of `parallel` (`sim.parallel`), in run order. On a
    Ray cluster, a run's profile must be at the same path on the node that serves it."""
    from ..parallel import run_jobs

    def done(index: int, _) -> None:
        if progress:
            print(f"[{index + 1}/{len(specs)}] {scenario.name}: {specs[index].label}: served "
                  f"and simulated", file=sys.stderr)

    if progress:
        print(f"{scenario.name}: {len(specs)} runs on {parallel.describe(len(specs))}",
              file=sys.stderr)
    return run_jobs(validate_run_job, [(spec, base_dir, calibrate) for spec in specs],
                    parallel, done)


def validate_run_job(job: tuple) -> ValidationRun:
    """`validate_run` of one job (spec, base_dir, calibrate), for `sim.parallel`."""
    spec, base_dir, calibrate = job
    return validate_run(spec, base_dir, calibrate)


def mode_config(config, mode: str):
    """A resolved config in another mode."""
    return config.with_mode(mode)


def validate_run(spec, base_dir=None, calibrate: bool = False,
                 progress: bool = False) -> ValidationRun:
    """Serve, then simulate, one run; compare them. With `calibrate`, the machine's speed is
    measured just before serving and the simulation's cost model scaled by it. `progress`: a
    progress bar while serving, on a terminal."""
    cost = build_cost_model(spec.config.cost, spec.config.model, spec.config.engine.block_size)
    speeds = []

    def calibration(executor):
        speeds.append(measure_speed(executor.params, spec.config.model.vocab_size,
                                    reference_of(cost)))

    bar = ServingBar(spec.label) if progress else None
    try:
        served, log = serve_logged(mode_config(spec.config, "serve"), base_dir,
                                   calibration if calibrate else None, progress=bar)
    finally:
        if bar is not None:
            bar.close()
    if calibrate:
        cost = ScaledCost(cost, speeds[0])
    simulate_config = mode_config(spec.config, "simulate")
    simulated = run_config(simulate_config, base_dir=base_dir, cost=cost)
    steps = step_rows(spec.label, served, log, cost)
    ratio = speed_ratio(steps)
    slo, warmup_s = spec.config.slo.limits(), spec.config.workload.warmup_s
    served_summary = summarize(served, slo, warmup_s)
    errors = error_rows(spec.label, served_summary, summarize(simulated, slo, warmup_s))
    if math.isfinite(ratio):
        scaled = run_config(simulate_config, base_dir=base_dir, cost=ScaledCost(cost, ratio))
        scaled_summary = summarize(scaled, slo, warmup_s)
    else:  # no step served, or none predicted to take time: nothing to scale by
        scaled_summary = dict.fromkeys(served_summary, math.nan)
    normalized = error_rows(spec.label, served_summary, scaled_summary)
    return ValidationRun(spec, served, simulated, errors, steps, ratio, normalized,
                         speeds[0] if calibrate else None)


def write_outputs(result: Validation, out_dir: Path) -> list[Path]:
    """validation.csv, validation_speed_normalized.csv, step_errors.csv, validation_cdfs.png,
    report.md, report.html, and serve/ and simulate/."""
    import reports
    from reports.cdf_chart import cdf_chart, cdf_line
    from reports.validation_report import write_validation_report

    out_dir.mkdir(parents=True, exist_ok=True)
    scenario, written = result.scenario, []
    for mode in ("serve", "simulate"):
        results = [(replace(run.spec, config=mode_config(run.spec.config, mode)),
                    getattr(run, mode)) for run in result.runs]
        moded = replace(scenario, base=mode_config(scenario.base, mode))
        written += reports.write_report(moded, results, out_dir / mode).files
    write_csv(result.rows, out_dir / "validation.csv")
    write_csv(result.normalized_rows, out_dir / "validation_speed_normalized.csv")
    write_steps_csv([row for run in result.runs for row in run.steps], out_dir / "step_errors.csv")
    lines, styles = [], []
    for index, run in enumerate(result.runs):
        color = f"C{index % 10}"  # one hue per variant: served solid, simulated dashed
        for mode, shown, style in (("serve", "served", "-"), ("simulate", "simulated", "--")):
            recorder = getattr(run, mode)
            lines.append(cdf_line(f"{run.label}: {shown}", run.spec, recorder))
            styles.append((color, style))
    report = write_validation_report(out_dir, scenario, display_rows(result.rows),
                                     result.run_notes(), result.headline(),
                                     cdf_chart(lines, styles))
    return written + [out_dir / name for name in
                      ("validation.csv", "validation_speed_normalized.csv", "step_errors.csv")] \
        + report


class ServingBar:
    """A progress bar while a run is served in real time (`engine.server.serve`'s progress
    callback): requests done of all, and the time elapsed beside the last request's arrival
    time, which serving cannot finish before. Shown only on a terminal."""

    def __init__(self, label: str):
        self.label = label
        self.bar = None

    def __call__(self, done: int, total: int, elapsed_s: float, last_arrival_s: float) -> None:
        if self.bar is None:
            from tqdm import tqdm

            last = tqdm.format_interval(last_arrival_s)
            self.bar = tqdm(total=total, desc=f"serving {self.label}", unit="req",
                            disable=not sys.stderr.isatty(),
                            bar_format="{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} "
                                       "requests [{elapsed} elapsed; last arrival at " + last
                                       + "]")
        self.bar.update(done - self.bar.n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
