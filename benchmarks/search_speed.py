"""Capacity search speed: a 100-point search serially, on a local process pool and on a local
Ray, wall times side by side, and a check that all three give the same figures.

The search is the built-in `capacity-search` with a small workload (--requests a probe,
default 100) over a grid of 100 points (five GPUs x TP 1 and 2 x two max_num_seqs x five
per-step server overheads), each point a bisection of several simulations. The pool and Ray get
--workers CPUs each (default 2); Ray's time includes starting it and shutting it down, as
`servesim search --ray` pays. The machine's state is printed with the figures: the seconds a
fixed pure-Python loop takes (its speed) and the load average.

    python benchmarks/search_speed.py
    python benchmarks/search_speed.py --requests 60 --workers 2
"""

from __future__ import annotations

import argparse
import pickle
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from sim.cli.flag_types import positive_integer  # noqa: E402
from sim.profiling import threads  # noqa: E402

threads.apply(threads.DEFAULT_THREADS)  # before NumPy loads: workers run BLAS on one thread too

import scenarios  # noqa: E402
from sim.parallel import Parallel  # noqa: E402
from sim.search import search, search_scenario  # noqa: E402
from sim_speed import machine_state  # noqa: E402

# 5 GPUs x 2 TP x 2 max_num_seqs x 5 per-step overheads: 100 points.
GRID = {"hardware.gpu": ["a100-80gb-sxm", "h100-sxm", "l40s", "h200", "a100-40gb-sxm"],
        "hardware.tp": [1, 2],
        "engine.max_num_seqs": [64, 256],
        "hardware.step_overhead_s": [0.0005, 0.001, 0.002, 0.004, 0.008]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=positive_integer, default=100, help="requests a probe")
    parser.add_argument("--workers", type=positive_integer, default=2,
                        help="pool processes and Ray CPUs")
    args = parser.parse_args()
    grid = "search.grid = " + "{" + ", ".join(f'"{k}" = {v!r}'.replace("'", '"')
                                              for k, v in GRID.items()) + "}"
    scenario = search_scenario(scenarios.load(
        "capacity-search", [f"workload.num_requests={args.requests}", grid]))
    points = len(scenario.specs)
    print(machine_state())
    figures, times = {}, {}
    for name, parallel in (("serial", Parallel(workers=1)),
                           ("process pool", Parallel(workers=args.workers)),
                           ("Ray (local)", Parallel(workers=args.workers, ray=True))):
        start = time.perf_counter()
        result = search(scenario, parallel)
        times[name] = time.perf_counter() - start
        figures[name] = pickle.dumps(result.rows())
    probes = sum(len(point.probes) for point in result.points)
    print(f"{points} points, {probes} simulations of {args.requests} requests; "
          f"{args.workers} workers for the pool and Ray")
    for name, seconds in times.items():
        print(f"  {name:<13} {seconds:7.2f} s   {times['serial'] / seconds:4.2f}x serial")
    same = len(set(figures.values())) == 1
    print(f"identical figures serial / pool / Ray: {'yes' if same else 'NO'}")
    print(machine_state())


if __name__ == "__main__":
    main()
