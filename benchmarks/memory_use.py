"""What a `servesim run` holds in memory, per request, per replica and per run: the figures
`sim/memory.py` estimates a scenario's memory with before anything runs.

Each figure is the slope between two whole `servesim run` processes (simulation, tables,
charts and report: everything the command keeps at its peak) that differ only in one count,
read from each process's peak resident memory (`ru_maxrss`), so the interpreter and the
libraries cancel out:

- per request: the default scenario's workload (lognormal prompts around 128 tokens, outputs of
  16 to 256) served by continuous batching, at a rate it keeps up with and at 1.5x what it
  serves (a queue that grows all run: more steps, longer records), at two request counts;
- per replica: a cluster of replicas of the default engine, each serving a few requests;
- per run: a sweep of one request a run, at two numbers of sweep points.

    python benchmarks/memory_use.py            # about two minutes
    python benchmarks/memory_use.py --quick    # smaller counts, a rougher slope
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sim_speed import machine_state  # noqa: E402

from sim.memory import REPLICA_BYTES, REQUEST_BYTES, RUN_BYTES  # noqa: E402

WORKLOAD = """
[workload]
num_requests = {n}
arrival = {{ process = "poisson", rate = {rate} }}
prompt_tokens = {{ dist = "lognormal", median = 128, sigma = 0.6, min = 4, max = 1024 }}
output_tokens = {{ dist = "uniform", low = 16, high = 256 }}
"""
CLUSTER = """
[cluster]
replicas = {n}
router = "round_robin"
[workload]
num_requests = {requests}
arrival = {{ process = "poisson", rate = 200.0 }}
prompt_tokens = {{ dist = "fixed", value = 32 }}
output_tokens = {{ dist = "fixed", value = 8 }}
"""
SWEEP = """
[workload]
num_requests = 1
arrival = {{ process = "poisson", rate = 1.0 }}
prompt_tokens = {{ dist = "fixed", value = 32 }}
output_tokens = {{ dist = "fixed", value = 8 }}
[sweep]
"workload.arrival.rate" = [{values}]
"""


def peak_bytes(text: str, folder: Path) -> int:
    """The peak resident memory of `servesim run` of a scenario's text, in bytes."""
    scenario = folder / "case.toml"
    scenario.write_text(text)
    pid = os.fork()
    if pid == 0:  # the child: the command, as a user runs it (its summary table not shown)
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
        os.execv(sys.executable, [sys.executable, "-m", "sim.cli", "run", str(scenario),
                                  "--out", str(folder / "out"), "--quiet", "--jobs", "1"])
    _, status, usage = os.wait4(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, text
    return usage.ru_maxrss * 1024  # kilobytes on Linux


def slope(make, low: int, high: int) -> float:
    """Bytes per unit between the scenarios `make(low)` and `make(high)`."""
    with tempfile.TemporaryDirectory() as tmp:
        small = peak_bytes(make(low), Path(tmp))
        large = peak_bytes(make(high), Path(tmp))
    return (large - small) / (high - low)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller counts")
    args = parser.parse_args()
    scale = 5 if args.quick else 1
    print(machine_state())
    figures = {
        "request, keeping up (4 req/s)": slope(lambda n: WORKLOAD.format(n=n, rate=4.0),
                                               20_000 // scale, 100_000 // scale),
        "request, overloaded (6.5 req/s)": slope(lambda n: WORKLOAD.format(n=n, rate=6.5),
                                                 20_000 // scale, 100_000 // scale),
        "replica": slope(lambda n: CLUSTER.format(n=n, requests=2 * n),
                         100 // scale, 1_000 // scale),
        "run": slope(lambda n: SWEEP.format(values=", ".join(str(1 + i) for i in range(n))),
                     100 // scale, 1_000 // scale),
    }
    for what, value in figures.items():
        print(f"{what:34s} {value:10,.0f} bytes")
    print(f"sim/memory.py assumes: {REQUEST_BYTES:,} bytes a request, {REPLICA_BYTES:,} a "
          f"replica, {RUN_BYTES:,} a run")


if __name__ == "__main__":
    main()
