"""report.md and report.html of `servesim validate`: what was compared, the error table
(validation.csv's figures, in milliseconds and percent), the step-level prediction error of each
run, and the CDF chart with a variant's served and simulated lines in one colour (solid and
dashed). Each mode's own report is linked (`serve/report.html`, `simulate/report.html`).

The figures arrive as text rows (`sim.validation.table.display_rows`): this module lays them
out, it computes nothing.
"""

from __future__ import annotations

from pathlib import Path

from .render import Heading, Image, Paragraph, Table, to_html, to_markdown

CDF_FILE = "validation_cdfs.png"


def validation_blocks(scenario, table: tuple[list, list], notes: list[str], headline: str,
                      cdf_png: bytes, against: str | None = None) -> list:
    """The report's blocks; `table`: (header, rows) of the error table as text. `against`: the
    server benchmarked instead of serving in-process (`validate --against`)."""
    if against is not None:
        return _against_blocks(scenario, table, notes, headline, cdf_png, against)
    blocks = [Heading(1, f"servesim validation: {scenario.name}")]
    if scenario.description:
        blocks.append(Paragraph(scenario.description))
    blocks += [
        Paragraph("Every run of the scenario was served in real time by the NumPy engine and "
                  "simulated with the cost model on the same requests (the same arrival times, "
                  "prompt and output lengths). error % = 100 x (simulate - serve) / serve: "
                  "positive when the simulator predicts a slower server than the real one."),
        Heading(2, "Simulated against served"), Table(*table),
        Paragraph(headline[:1].upper() + headline[1:] + ". Latencies in milliseconds; the same "
                  "figures, in seconds, are in `validation.csv`."),
        Heading(2, "Step by step"),
        *[Paragraph(note) for note in notes],
        Paragraph("Every served step with the cost model's prediction for its shape is in "
                  "`step_errors.csv`; `validation_speed_normalized.csv` compares the served "
                  "run with a simulation scaled by the served steps' total speed."),
        Heading(2, "Latency distributions, served (solid) and simulated (dashed)"),
        Image(CDF_FILE, cdf_png, "Latency CDFs, served and simulated"),
        Heading(2, "Each mode's own report"),
        Paragraph("[served](serve/report.html) and [simulated](simulate/report.html): "
                  "what was run, the summary, the charts and the files of each mode."),
    ]
    return blocks


def _against_blocks(scenario, table, notes, headline, cdf_png, against: str) -> list:
    """The report of `validate --against`: the server benchmarked, the simulation, no steps."""
    blocks = [Heading(1, f"servesim validation: {scenario.name} against {against}")]
    if scenario.description:
        blocks.append(Paragraph(scenario.description))
    return blocks + [
        Paragraph(f"Every distinct workload of the scenario was sent to {against} "
                  "(`servesim bench`: latencies measured by the client) and simulated with the "
                  "cost model on the same requests (the same arrival times, prompt and output "
                  "lengths). error % = 100 x (simulate - serve) / serve: positive when the "
                  "simulator predicts a slower server than the real one."),
        Heading(2, "Simulated against benchmarked"), Table(*table),
        Paragraph(headline[:1].upper() + headline[1:] + ". Latencies in milliseconds; the same "
                  "figures, in seconds, are in `validation.csv`."),
        Heading(2, "What the client saw"), *[Paragraph(note) for note in notes],
        Paragraph("A client cannot see the server's steps, so there is no step-level "
                  "comparison: `step_errors.csv` and `validation_speed_normalized.csv` are not "
                  "written."),
        Heading(2, "Latency distributions, benchmarked (solid) and simulated (dashed)"),
        Image(CDF_FILE, cdf_png, "Latency CDFs, benchmarked and simulated"),
        Heading(2, "Each side's own report"),
        Paragraph("[benchmarked](bench/report.html) and [simulated](simulate/report.html)."),
    ]


def write_validation_report(out_dir: Path, scenario, table, notes, headline, cdf_png,
                            against: str | None = None) -> list:
    """validation_cdfs.png, report.md and report.html in `out_dir`; returns their paths."""
    blocks = validation_blocks(scenario, table, notes, headline, cdf_png, against)
    (out_dir / CDF_FILE).write_bytes(cdf_png)
    (out_dir / "report.md").write_text(to_markdown(blocks), encoding="utf-8")
    (out_dir / "report.html").write_text(
        to_html(blocks, f"servesim validation: {scenario.name}"), encoding="utf-8")
    return [out_dir / CDF_FILE, out_dir / "report.md", out_dir / "report.html"]
