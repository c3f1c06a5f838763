"""What the output-folder tests share: a small run of the linear cost model written as a
scenario file, and `servesim run` into a folder."""

from __future__ import annotations

from pathlib import Path

from sim.cli import main

PLACES = """
name = "places"
[cost]
model = "linear"
[workload]
num_requests = 6
arrival = { process = "poisson", rate = 8.0 }
prompt_tokens = { dist = "uniform", low = 8, high = 32 }
output_tokens = { dist = "fixed", value = 4 }
"""


def places_file(tmp_path) -> Path:
    """PLACES written to `tmp_path`/places.toml."""
    path = tmp_path / "places.toml"
    path.write_text(PLACES)
    return path


def run(scenario_file, out, *more) -> int:
    """`servesim run SCENARIO_FILE --out OUT --quiet MORE`'s exit status."""
    return main(["run", str(scenario_file), "--out", str(out), "--quiet", *more])
