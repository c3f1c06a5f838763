"""`servesim validate SCENARIO --against URL`: the simulator against a running server.

Each distinct workload of the scenario's runs is sent to the server (`sim.bench`, latencies
measured by the client) and simulated with the scenario's cost model on the same requests;
validation.csv compares them as `validate` does; when a request finished on one side only (it
failed on the server, say, where the simulation served it), the headline says the two sides
counted different requests (and the command's exit status is 1). A client cannot see the
server's steps, so there is no step table (`step_errors.csv`) and no speed-normalized
comparison. Written to `out_dir`: validation.csv, validation_cdfs.png, report.md, report.html,
and each side's own report in `bench/` and `simulate/`.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from engine.benchmark import summarize
from scenarios import ScenarioError

from ..bench.run import (BenchOptions, bench_run, distinct_runs, server_once,
                         write_bench_report)
from ..bench.urls import shown_url
from ..runner import run_config
from .table import display_rows, error_rows, max_abs_error, text_table, write_csv
from .runs import validatable_runs
from .result import finished_apart, percent_text
from .validate import mode_config


def validate_against(scenario, options: BenchOptions, out_dir, profile: str = "auto",
                     manifest: dict | None = None) -> tuple[str, list, int]:
    """Bench and simulate every distinct workload of `scenario`, write the files to `out_dir`
    (whole or not at all) and return (the printed text: the error table, what the client saw,
    the headline and where the report is; every request sent, as `RequestResult`s; how many
    requests finished on one side only)."""
    from reports.output import output_folder

    runs = validatable_runs(scenario, False, profile, options.progress, in_process=False)
    specs = distinct_runs(runs)
    if len(specs) < len(runs):  # runs that send the same requests to differently set servers
        same = [spec.label for spec in runs if spec not in specs]
        raise ScenarioError(f"{scenario.path}: --against: {', '.join(same)} send the same "
                            f"requests as another run and differ in the server's settings; "
                            f"the server at the URL runs one of them: keep that one (--variant, "
                            f"or one value of the sweep)")
    base_dir = Path(scenario.path).parent if scenario.path else None
    manifest = manifest or {"command": "validate", "scenario": scenario.name}
    with output_folder(out_dir, manifest) as folder:
        server = server_once(options)
        benched = [bench_run(spec, options, server, base_dir) for spec in specs]
        simulated = [run_config(mode_config(spec.config, "simulate"), base_dir=base_dir)
                     for spec in specs]
        rows = [row for run, sim in zip(benched, simulated)
                for row in error_rows(run.spec.label, *(summarize(recorder, *counted(run.spec))
                                                        for recorder in (run.recorder, sim)))]
        notes = [f"{run.spec.label}: " + "; ".join(run.notes) for run in benched]
        apart = [finished_apart(run.recorder, sim) for run, sim in zip(benched, simulated)]
        headline = (f"max |error| over p50/p90/p99 of TTFT, TPOT, E2E: "
                    f"{percent_text(max_abs_error(rows))}" + unlike(apart, benched))
        _write(scenario, options, benched, list(zip(specs, simulated)), rows, notes, headline,
               folder)
    text = "\n".join([text_table(rows), "", *notes, headline,
                      f"report: {Path(out_dir) / 'report.html'}"])
    return (text, [result for run in benched for result in run.results],
            sum(server + simulation for server, simulation in apart))


def unlike(apart: list, benched) -> str:
    """What the headline adds when some requests finished on one side only: the two sides'
    figures are then over different requests."""
    server, simulation = (sum(side) for side in zip(*apart))
    if not server + simulation:
        return ""
    total = sum(len(run.results) for run in benched)
    return (f", but over unlike requests: of {total}, {simulation} finished in the simulation "
            f"and not on the server (bench/bench_requests.csv says why), {server} the reverse")


def counted(spec) -> tuple:
    """(SLO limits, warm-up) of a run: what its summaries count, as its own report's do."""
    return spec.config.slo.limits(), spec.config.workload.warmup_s


def _write(scenario, options, benched, simulated, rows, notes, headline, folder: Path) -> None:
    import reports
    from reports.cdf_chart import cdf_chart, cdf_line
    from reports.validation_report import write_validation_report

    write_bench_report(scenario, benched, options, folder / "bench")
    sim_results = [(replace(spec, config=mode_config(spec.config, "simulate")), recorder)
                   for spec, recorder in simulated]
    reports.write_report(replace(scenario, base=mode_config(scenario.base, "simulate")),
                         sim_results, folder / "simulate")
    write_csv(rows, folder / "validation.csv")
    lines, styles = [], []
    for index, (run, (spec, recorder)) in enumerate(zip(benched, sim_results)):
        color = f"C{index % 10}"  # one hue per run: benchmarked solid, simulated dashed
        lines.append(cdf_line(f"{run.spec.label}: benchmarked", run.spec, run.recorder))
        lines.append(cdf_line(f"{spec.label}: simulated", spec, recorder))
        styles += [(color, "-"), (color, "--")]
    write_validation_report(folder, scenario, display_rows(rows), notes, headline,
                            cdf_chart(lines, styles),
                            against=shown_url(options.url).rstrip("/") + options.endpoint)
