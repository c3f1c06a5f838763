"""What the command line's tests share: a scenario loaded from flags as `servesim run` loads
it, a small scenario file to add a sweep or variants to, and the one line an error prints."""

from __future__ import annotations

from sim.cli import build_parser
from sim.cli.common import load_scenario
from sim.cli.flag_values import split_set_values

def loaded(*argv):
    """The scenario `servesim run ARGV` would run."""
    return load_scenario(build_parser().parse_args(split_set_values(["run", *argv])))


def small_scenario(tmp_path, name: str, rest: str):
    """A scenario file of 20 short Poisson requests and then `rest` (a sweep, variants)."""
    path = tmp_path / f"{name}.toml"
    path.write_text(f"""name = "{name}"
[workload]
num_requests = 20
arrival = {{ process = "poisson", rate = 1 }}
prompt_tokens = {{ dist = "fixed", value = 50 }}
output_tokens = {{ dist = "fixed", value = 20 }}
""" + rest)
    return path


def one_error_line(capsys) -> str:
    """What a command printed to stderr: one line, and no traceback."""
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]
