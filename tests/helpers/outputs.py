"""What the output-folder tests share: small runs of the linear cost model (`INTEGRITY`,
`PLACES`, written as a file by `places_file`), `servesim run` into a folder, and what a command
left beside its output (`leftovers`)."""

from __future__ import annotations

from pathlib import Path

from sim.cli import main

INTEGRITY = """
name = "integrity"
[cost]
model = "linear"
[workload]
num_requests = 12
arrival = { process = "poisson", rate = 8.0 }
prompt_tokens = { dist = "uniform", low = 8, high = 64 }
output_tokens = { dist = "fixed", value = 6 }
"""
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


def leftovers(parent: Path) -> list[str]:
    """Temporary folders, old copies or locks a command left beside its output."""
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))
