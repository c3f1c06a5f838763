"""Profiling methods side by side: the served fit (the default) and the isolated grid, judged on
the same steps served in the real loop that neither has seen.

1. Profile the model both ways (`profile_engine(method="served")`, then `method="grid"`,
   quick unless --full-grid; neither is stored in the profile cache).
2. Serve the held-out profiling workloads (`sim.profiling.workloads.HELD_OUT`) once more.
3. Print each profile's error on those steps: median and p90 of |predicted - served| / served
   (the simulator's charge: the step's cost, its after-prefill and wake-up costs), the mean
   signed error and the total predicted / served time, with the machine's state.

    python benchmarks/profile_methods.py                 # the default model (about 5 minutes)
    python benchmarks/profile_methods.py --full-grid     # the grid as `servesim profile
                                                         #   --method grid` measures it (13 min)
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from sim.profiling import threads

threads.apply(threads.DEFAULT_THREADS)  # before NumPy loads, as `servesim profile` does

from dataclasses import asdict  # noqa: E402

from engine.model import ModelConfig, init_params  # noqa: E402
from sim.costs import load_profile  # noqa: E402
from sim.profiling.profiler import profile_engine  # noqa: E402
from sim.profiling.served import ServedSteps, served_steps, step_errors  # noqa: E402
from sim.profiling.serving import serve_logged  # noqa: E402
from sim.profiling.workloads import HELD_OUT  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="out/profile-methods", help="output directory")
    parser.add_argument("--full-grid", action="store_true", help="the full grid (13 minutes)")
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    model = asdict(ModelConfig())
    timings = {}
    for method in ("served", "grid"):
        t0 = time.perf_counter()
        profile_engine(model, f"{args.out}/{method}.json", quick=method == "grid" and not
                       args.full_grid, method=method, store=False)
        timings[method] = time.perf_counter() - t0
    params = init_params(ModelConfig(**model))
    steps = ServedSteps.join([served_steps(*_served(w.config(model), params)) for w in HELD_OUT])
    print(f"{len(steps)} held-out steps served after both profiles; load average "
          f"{os.getloadavg()[0]:.2f}")
    print(f"{'method':8s} {'profiling':>10s} {'median |err|':>13s} {'p90 |err|':>10s} "
          f"{'mean err':>9s} {'predicted/served':>17s}")
    for method in ("served", "grid"):
        e = step_errors(load_profile(f"{args.out}/{method}.json"), steps)
        print(f"{method:8s} {timings[method]:9.0f}s {100 * e['median_abs_rel_error']:12.1f}% "
              f"{100 * e['p90_abs_rel_error']:9.1f}% {100 * e['mean_rel_error']:+8.1f}% "
              f"{e['total_time_ratio']:17.3f}")
    return 0


def _served(config, params):
    recorder, log = serve_logged(config, params=params)
    return recorder, log.shapes


if __name__ == "__main__":
    sys.exit(main())
