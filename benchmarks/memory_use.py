"""What a `servesim run` holds in memory, per request, per replica and per run: the figures
`sim/memory.py` estimates a scenario's memory with before anything runs.

Each figure is the slope between two whole `servesim run` commands (simulation, tables, charts
and report: everything the command keeps at its peak) that differ only in one count, so the
interpreter and the libraries cancel out. A command's memory is the proportional set size (Pss,
from /proc/PID/smaps_rollup: pages shared after a fork counted once) of its process and the
chart process it forks, summed and sampled every 100 ms, at its peak:

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
import subprocess
import sys
import tempfile
import time
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
    """The peak memory of `servesim run` of a scenario's text and its chart process, in
    bytes."""
    scenario = folder / "case.toml"
    scenario.write_text(text)
    command = subprocess.Popen([sys.executable, "-m", "sim.cli", "run", str(scenario), "--out",
                                str(folder / "out"), "--quiet", "--jobs", "1"],
                               stdout=subprocess.DEVNULL)
    peak = 0
    while command.poll() is None:
        peak = max(peak, tree_pss(command.pid))
        time.sleep(0.1)
    assert command.returncode == 0, text
    return peak


def tree_pss(pid: int) -> int:
    """Bytes of the proportional set size of a process and its children (0 once gone)."""
    total = 0
    for process in (pid, *children(pid)):
        try:
            with open(f"/proc/{process}/smaps_rollup") as f:
                total += next(int(line.split()[1]) * 1024 for line in f
                              if line.startswith("Pss:"))
        except (OSError, StopIteration):
            pass
    return total


def children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def slope(make, low: int, high: int) -> float:
    """Bytes per unit between the scenarios `make(low)` and `make(high)`."""
    with tempfile.TemporaryDirectory() as tmp:
        small = peak_bytes(make(low), Path(tmp))
        large = peak_bytes(make(high), Path(tmp))
    return (large - small) / (high - low)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller counts")
    args = parser.parse_args()
    scale = 5 if args.quick else 1
    print(machine_state())
    cases = {
        "request, keeping up (4 req/s)": (lambda n: WORKLOAD.format(n=n, rate=4.0),
                                          20_000, 100_000),
        "request, overloaded (6.5 req/s)": (lambda n: WORKLOAD.format(n=n, rate=6.5),
                                            20_000, 100_000),
        "replica": (lambda n: CLUSTER.format(n=n, requests=2 * n), 100, 1_000),
        "run": (lambda n: SWEEP.format(values=", ".join(str(1 + i) for i in range(n))), 40, 200),
    }
    for what, (make, low, high) in cases.items():
        print(f"{what:34s} {slope(make, low // scale, high // scale):10,.0f} bytes", flush=True)
    print(f"sim/memory.py assumes: {REQUEST_BYTES:,} bytes a request, {REPLICA_BYTES:,} a "
          f"replica, {RUN_BYTES:,} a run")


if __name__ == "__main__":
    main()
