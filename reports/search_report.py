"""The files of a capacity search (`servesim search`, docs/sim/search.md): `search.csv` (one
row per point: its variant and grid values, then `SearchResult.rows()`), `probes.csv` (every
probe of every bisection, in order), `search.png`, `report.md` and `report.html`. Like a run's
files they are reproducible: the same scenario and seed give the same bytes, whether the points
ran serially, on a process pool or on Ray.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from scenarios.overrides import toml_text

from .describe import config_rows, differing_settings, varying_by_sweep
from .section_text import workload_text
from .key_figures import text_table
from .labels import short_labels, value_text
from .render import Heading, Image, Paragraph, Table, to_html, to_markdown
from .tables import label_values, run_keys
from .writer import FLOAT_FORMAT

STATUS_TEXT = {"found": "found", "at_least_high": "at least high",
               "fails_at_low": "fails at low"}
SHOWN = (("capacity req/s", "capacity", 2), ("attainment", "attainment", 3),
         ("measured goodput req/s", "measured_goodput", 2), ("GPUs", "gpus", 0),
         ("capacity/GPU", "capacity_per_gpu", 2), ("$/h", "dollars_per_hour", 2),
         ("capacity per $/h", "capacity_per_dollar_hour", 3),
         ("$ per M output tokens", "dollars_per_million_tokens", 2))


def write_search_report(result, out_dir) -> list[Path]:
    """Write the search's files into `out_dir`; returns their paths."""
    out_dir = Path(out_dir)
    specs = [point.spec for point in result.points]
    rows = result.rows()
    keys = run_keys([(spec, None) for spec in specs])
    points = pd.DataFrame([_labels(spec, keys) | row for spec, row in zip(specs, rows)])
    probes = pd.DataFrame([_labels(point.spec, keys) | {"probe": i} | vars(probe)
                           for point in result.points for i, probe in enumerate(point.probes)])
    labels, title = short_labels(specs)
    from .search_chart import search_chart  # matplotlib: imported where the chart is drawn

    chart = Image("search.png", search_chart(labels, rows, rate_unit(result, short=False)),
                  "Capacity against GPUs, and cost efficiency")
    written = []
    for frame, name in ((points, "search.csv"), (probes, "probes.csv")):
        frame.to_csv(out_dir / name, index=False, float_format=FLOAT_FORMAT, lineterminator="\n")
        written.append(out_dir / name)
    (out_dir / chart.filename).write_bytes(chart.png)
    blocks = report_blocks(result, labels, title, rows, chart)
    (out_dir / "report.md").write_text(to_markdown(blocks), encoding="utf-8")
    (out_dir / "report.html").write_text(
        to_html(blocks, f"servesim capacity search: {result.scenario.name}"), encoding="utf-8")
    return written + [out_dir / chart.filename, out_dir / "report.md", out_dir / "report.html"]


def search_text(result) -> str:
    """The points' key figures as an aligned text table, the best points, and the points
    whose capacity was found on too few requests."""
    labels, title = short_labels([point.spec for point in result.points])
    header, body = result_table(labels, result.rows(), title, rate_unit(result))
    short = [f"note: {label}: {point.short_run_note()}"
             for label, point in zip(labels, result.points) if point.short_run_note()]
    return text_table(header, body) + "\n\n" + "\n".join(best_lines(result, labels) + short)


def rate_unit(result, short: bool = True) -> str:
    """What the searched rate counts: requests, or conversations (`workload.sessions`: the
    arrival process starts conversations)."""
    if any(point.spec.config.workload.sessions for point in result.points):
        return "conversations/s"
    return "req/s" if short else "requests/s"


def result_table(labels: list[str], rows: list[dict], title: str | None = None,
                 unit: str = "req/s") -> tuple[list[str], list[list[str]]]:
    """(header, rows) of the points' key figures; `title` names the label column, `unit`
    the capacity's (`rate_unit`)."""
    header = [title or "point", "status", *(name.replace("capacity req/s", f"capacity {unit}")
                                            for name, _, _ in SHOWN)]
    body = [[label, STATUS_TEXT[row["status"]],
             *(_number(row[key], digits) for _, key, digits in SHOWN)]
            for label, row in zip(labels, rows)]
    return header, body


def best_lines(result, labels: list[str]) -> list[str]:
    """The best point by capacity per GPU and by capacity per dollar-hour (where prices are
    known), each with its figure, and the points whose capacity, only a lower bound, might
    rank them higher."""
    lines, rows = [], result.rows()
    rate = rate_unit(result, short=False)
    none_met = all(row["status"] == "fails_at_low" for row in rows)
    for figure, what, unit in (("capacity_per_gpu", "capacity per GPU", f"{rate} a GPU"),
                               ("capacity_per_dollar_hour", "capacity per dollar-hour",
                                f"{rate} per $/h")):
        best = result.best(figure)
        if best is None:
            why = ("no point met the target even at the bracket's bottom: lower search.rate's "
                   "low" if none_met else "no point has it")
            lines.append(f"best by {what}: none ({why})")
            continue
        index = result.points.index(best)
        row = rows[index]
        bound = " (a lower bound: it met the target at the bracket's top)" \
            if row["status"] == "at_least_high" else ""
        others = [label for label, point, other in zip(labels, result.points, rows)
                  if other["status"] == "at_least_high" and point is not best
                  and not math.isnan(other[figure])]
        if others:
            bound += (f"; {', '.join(others)} met the target at the bracket's top, so "
                      f"might rank higher (raise search.rate's high)")
        lines.append(f"best by {what}: {labels[index]}: {row[figure]:.3g} {unit}{bound}")
    return lines


def report_blocks(result, labels: list[str], title: str | None, rows: list[dict],
                  chart: Image) -> list:
    """The report: what was searched, the best points, every point's figures, the chart."""
    scenario = result.scenario
    blocks = [Heading(1, f"servesim capacity search: {scenario.name}")]
    if scenario.description:
        blocks.append(Paragraph(scenario.description))
    blocks += [Heading(2, "What was searched"), Table(["setting", "value"],
                                                      _settings_rows(result))]
    said = note_rows(result, labels)
    if said:
        blocks += [Heading(3, "Notes from the runs"), Table(["note", "points"], said)]
    blocks += [Heading(2, "Best configuration"),
               Paragraph("; ".join(best_lines(result, labels)) + ".")]
    header, body = result_table(labels, rows, title, rate_unit(result))
    blocks += [Heading(2, "Capacity of every point"), Table(header, body), Paragraph(
        "capacity: the highest arrival rate probed at which the target share of requests met "
        "every SLO; attainment: the share that met them there; measured goodput: the requests "
        "meeting every SLO per second of that probe's whole run, the drain of its last "
        "requests included (summary.csv's goodput); $/h: what the "
        "point's GPUs cost an hour. `found`: the capacity lies between it and the lowest rate "
        "that failed, within the tolerance; `at "
        "least high`: the target held at the bracket's top, so the capacity is at least that; "
        "`fails at low`: it failed even at the bracket's bottom. Every figure is in "
        "`search.csv`, every probe of every bisection in `probes.csv`.")]
    blocks += [Heading(2, "Chart"), chart]
    return blocks


def note_rows(result, labels: list[str]) -> list[list[str]]:
    """[note, the points whose probes said it] (`sim.notes`: a fallback to the roofline, say),
    each note once, in the order said."""
    points: dict = {}
    for label, point in zip(labels, result.points):
        for note in point.notes:
            points.setdefault(note, []).append(label)
    every = len(result.points)
    return [[note.removeprefix("note: "), "every point" if len(which) == every
             else ", ".join(which)] for note, which in points.items()]


def _settings_rows(result) -> list[list[str]]:
    settings, scenario = result.settings, result.scenario
    config = result.points[0].spec.config
    seeds = sorted({point.spec.config.seed for point in result.points})
    rate = settings.rate
    rows = [["scenario", f"{scenario.name} (`{scenario.source}`)"],
            ["target", f"{settings.target:g} of the requests meet every SLO "
                       f"({config_rows(config)['SLO (goodput)']})"],
            ["arrival rates", f"bisected between {rate['low']:g} and {rate['high']:g} "
                              f"{rate_unit(result, short=False)} (geometric midpoints), "
                              f"`{config.workload.arrival.process}` arrivals"],
            ["tolerance", f"stop when (failed - met) / failed < {settings.tolerance:g}"],
            ["seeds", ", ".join(map(str, seeds)) + " (the same requests at every rate of "
                                                   "a point, their arrival times scaled)"]]
    for key in scenario.sweep:
        rows.append([f"grid: `{key}`", ", ".join(value_text(v) for v in scenario.sweep[key])])
    probes = sum(len(point.probes) for point in result.points)
    rows.append(["points", f"{len(result.points)} ({len(scenario.variants)} variant(s) x "
                           f"{len(result.points) // len(scenario.variants)} grid points), "
                           f"{probes} simulations"])
    shared = config_rows(config)
    shared["workload"] = workload_text(config.workload, rate="the rate searched")
    points = [point.spec for point in result.points]
    varying = set(varying_by_sweep(points)) | set(differing_settings(points))
    for field in ("step costs", "model", "cluster", "hardware", "kernels", "scheduler",
                  "workload"):
        if field in shared:
            rows.append([field, shared[field] + (" (the first point's; it changes from point "
                                                 "to point)" if field in varying else "")])
    if scenario.overrides:
        rows.append(["overrides (--set)", ", ".join(f"`{k} = {toml_text(v)}`"
                                                    for k, v in scenario.overrides)])
    return rows


def _labels(spec, keys: list[str]) -> dict:
    return dict(zip(keys, label_values(spec, keys)))


def _number(value, digits: int) -> str:
    if isinstance(value, float) and math.isnan(value):
        return "n/a"
    return f"{value:,.{digits}f}"
