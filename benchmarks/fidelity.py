"""Fidelity: how closely the simulator predicts the real engine, over a set of scenarios.

For each scenario below, `sim.validation.validate` serves the requests in real time with the
NumPy engine and simulates the same requests with this machine's profile (`--profile auto`:
profiled once in the serving loop on synthetic workloads, never these scenarios, and cached);
the scenario is then served `--repeats - 1` more times. The script prints the simulator's errors
against the median of the servings (scenario x metric x stat) beside the spread of the servings
themselves (the noise floor: the same requests served again on the same machine), and, per
scenario, whether it meets the target: within 5% of the servings' median for p50 and p90 of
TTFT, TPOT and E2E (and p99 where a scenario has 1,000 requests or more) wherever the servings
agree within 5%, elsewhere within the larger of 5% and their spread. Then the same for the
simulation calibrated to the machine's speed just before the first serving (`validate
--calibrate`), the simulation with the profiled machine's jitter (`cost.jitter`, the median of
`--jitter-runs` realisations) and its own noise floor, and a diagnostic simulation whose step
costs are scaled by the served steps' total measured / predicted time (the machine's speed while
serving; see docs/validation/README.md). The machine's state (load average, the speed of a
fixed Python loop) is printed with every scenario.

Steps:
1. Capacity: for each scenario, the cost model's maximum sustainable request rate for the
   scenario's lengths and batching policy: 600 requests that all arrive at once are simulated
   and the rate at which they complete between the 20th and the 80th percentile of completions
   (a saturated server, without the start-up and drain phases) is its capacity. Each scenario's
   arrival rate is a fraction of it (its `load`).
2. Validate every scenario (at least `--requests` requests each, `--repeats` servings) and print.

Most scenarios use a model smaller than the default (about a millisecond a decode step), so a
scenario serves hundreds of requests in well under a minute; one runs the default model at 60%
of its capacity. BLAS runs single-threaded (the profile's setting, set before NumPy loads).

    python benchmarks/fidelity.py                       # every scenario (about 25 minutes)
    python benchmarks/fidelity.py --only load-70 --requests 40 --repeats 1
"""

from __future__ import annotations

import argparse
import os
import sys

from sim.cli.flag_types import positive_integer


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="out/fidelity", help="output directory")
    parser.add_argument("--requests", type=positive_integer, default=300,
                        help="requests per scenario at least (default 300: a stable p90)")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run only these scenarios")
    parser.add_argument("--repeats", type=positive_integer, default=3,
                        help="servings of each scenario (the reference is their median)")
    parser.add_argument("--jitter-runs", type=positive_integer, default=21,
                        help="realisations of the jittered simulation (the table is their median)")
    return parser.parse_args(argv)


ARGS = parse_args() if __name__ == "__main__" else None
if ARGS is not None:  # before NumPy is imported: BLAS reads it once, at load time
    from sim.profiling import threads

    threads.apply(threads.DEFAULT_THREADS)

import copy  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

import scenarios  # noqa: E402
from engine.benchmark import summarize  # noqa: E402
from sim.runner import run_config  # noqa: E402
from sim.validation.validate import validate  # noqa: E402
from sim.validation.table import HEADLINE, error_rows  # noqa: E402

from fidelity_stats import (as_rows, median_summary, spread, table_text,  # noqa: E402
                            target_verdict, worst)

MODEL = {"vocab_size": 512, "d_model": 256, "n_layers": 2, "n_heads": 4, "d_ff": 1024,
         "max_seq_len": 4096}
BASE = {
    "seed": 0,
    "model": MODEL,
    "engine": {"block_size": 16, "num_kv_blocks": 1024, "max_num_seqs": 32,
               "max_num_batched_tokens": 1024},
    "workload": {"arrival": {"process": "poisson", "rate": 1.0},
                 "prompt_tokens": {"dist": "lognormal", "median": 96, "sigma": 0.6, "min": 8,
                                   "max": 512},
                 "output_tokens": {"dist": "uniform", "low": 8, "high": 96}},
}
DEFAULT_MODEL = {"vocab_size": 512, "d_model": 512, "n_layers": 4, "n_heads": 8, "d_ff": 2048,
                 "max_seq_len": 4096}
# name -> (fraction of capacity, dotted overrides of BASE)
SCENARIOS = {
    "default-60": (0.6, {"model": DEFAULT_MODEL,
                         "workload.prompt_tokens": {"dist": "lognormal", "median": 96,
                                                    "sigma": 0.6, "min": 4, "max": 1024},
                         "workload.output_tokens": {"dist": "uniform", "low": 16,
                                                    "high": 96}}),
    "low-load": (0.2, {}),
    "load-70": (0.7, {}),
    "load-90": (0.9, {}),
    "bursty": (0.6, {"workload.arrival": {"process": "gamma", "rate": 1.0, "cv": 3.0}}),
    "kv-pressure": (0.7, {"engine.num_kv_blocks": 40,
                          "workload.prompt_tokens": {"dist": "lognormal", "median": 128,
                                                     "sigma": 0.4, "min": 32, "max": 320},
                          "workload.output_tokens": {"dist": "uniform", "low": 64, "high": 192}}),
    "chunked-prefill": (0.6, {"scheduler.chunked_prefill": True,
                              "engine.max_num_batched_tokens": 128,
                              "workload.prompt_tokens": {"dist": "lognormal", "median": 512,
                                                         "sigma": 0.4, "min": 128, "max": 1536},
                              "workload.output_tokens": {"dist": "uniform", "low": 16,
                                                         "high": 64}}),
    "static": (0.6, {"scheduler.policy": "static", "scheduler.max_batch_size": 8}),
}
CAPACITY_REQUESTS = 600
P99_REQUESTS = 1000  # p99 is part of the target only for scenarios of this many requests


def scenario_table(name: str, overrides: dict, profile: str, rate: float, n: int) -> dict:
    """The scenario as a TOML-shaped dict: BASE, the overrides, this machine's profile of its
    model, rate and size."""
    table = copy.deepcopy(BASE) | {"name": name, "description": f"fidelity scenario {name}"}
    for key, value in overrides.items():
        *path, leaf = key.split(".")
        node = table
        for part in path:
            node = node.setdefault(part, {})
        node[leaf] = copy.deepcopy(value)
    table["cost"] = {"model": "profile", "profile": str(profile)}
    table["workload"]["arrival"]["rate"] = float(rate)
    table["workload"]["num_requests"] = int(n)
    return table


def to_toml(table: dict) -> str:
    """TOML text of a two-level dict (scalars, then one [section] per sub-table)."""
    scalars = [f"{k} = {_value(v)}" for k, v in table.items() if not isinstance(v, dict)]
    sections = [f"\n[{k}]\n" + "\n".join(f"{kk} = {_value(vv)}" for kk, vv in v.items())
                for k, v in table.items() if isinstance(v, dict)]
    return "\n".join(scalars) + "\n" + "\n".join(sections) + "\n"


def _value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {_value(x)}" for k, x in v.items()) + " }"
    return repr(v)


def capacity_rps(config) -> float:
    """The cost model's maximum sustainable request rate for this config's lengths and policy:
    CAPACITY_REQUESTS requests arriving at once, simulated; completions per second between the
    20th and 80th percentile of completion times."""
    cfg = config.with_mode("simulate").updated({
        "workload.num_requests": CAPACITY_REQUESTS,
        "workload.arrival": {"process": "constant", "rate": 1e9}})
    finish = np.sort(np.asarray(run_config(cfg).request_columns()["finish_s"], float))  # [n]
    lo, hi = int(0.2 * len(finish)), int(0.8 * len(finish))
    return (hi - lo) / (finish[hi] - finish[lo])


def build_scenarios(out_dir: Path, requests: int, only) -> list:
    """Write each scenario's TOML (this machine's profile of its model, profiled on first use;
    the rate from its capacity) and load it."""
    from sim.validation.machine import profile_for

    unknown = sorted(set(only or ()) - set(SCENARIOS))
    if unknown:
        sys.exit(f"fidelity.py: error: --only: no scenario {', '.join(unknown)} (the "
                 f"scenarios: {', '.join(SCENARIOS)})")
    loaded = []
    (out_dir / "scenarios").mkdir(parents=True, exist_ok=True)
    for name, (load, overrides) in SCENARIOS.items():
        if only and name not in only:
            continue
        model = overrides.get("model", MODEL) | {"seed": 0}
        profile = profile_for(model, progress=True)
        probe = out_dir / "scenarios" / f"{name}.toml"
        probe.write_text(to_toml(scenario_table(name, overrides, profile, 1.0, requests)))
        capacity = capacity_rps(scenarios.load(probe).base)
        rate = load * capacity
        n = requests
        probe.write_text(to_toml(scenario_table(name, overrides, profile, rate, n)))
        loaded.append((scenarios.load(probe), load, capacity))
        print(f"{name}: capacity {capacity:.1f} req/s (cost model), rate {rate:.2f} req/s "
              f"({load:.0%}), {n} requests", file=sys.stderr)
    return loaded


def calibrated_cost(run):
    """The scenario's cost model scaled by the run's calibration (what its simulation used)."""
    from sim.costs import cost_model
    from sim.costs.calibrate import ScaledCost

    config = run.spec.config
    return ScaledCost(cost_model(config.cost, config.model), run.calibration)


def servings(run, repeats: int) -> list[tuple[dict, float]]:
    """(summary, speed ratio to the calibrated prediction) of the validation's serving and of
    `repeats - 1` more."""
    from sim.validation.validate import mode_config
    from sim.profiling.serving import serve_logged
    from sim.validation.steps import speed_ratio, step_rows

    config, slo = run.spec.config, run.spec.config.slo.limits()
    cost = calibrated_cost(run)
    out = [(summarize(run.serve, slo), run.speed_ratio)]
    for _ in range(repeats - 1):
        recorder, log = serve_logged(mode_config(config, "serve"))
        out.append((summarize(recorder, slo), speed_ratio(step_rows("", recorder, log, cost))))
    return out


def compare(name: str, run, served: list, jitter_runs: int) -> dict:
    """Against the median of the servings, the error rows of: the simulation ("simulate"), the
    calibrated one ("calibrated"), the median of `jitter_runs` jittered realisations ("jitter")
    and the speed-scaled simulation ("scaled"); and, in the same layout, the spread of the servings ("spread") and the median
    spread of the jittered realisations taken as many at a time as there are servings
    ("jitter_spread")."""
    from sim.validation.validate import mode_config
    from sim.costs.calibrate import ScaledCost

    config, slo = run.spec.config, run.spec.config.slo.limits()
    summaries = [s for s, _ in served]
    median = median_summary(summaries)
    jittered_config = mode_config(config, "simulate").updated({"cost.jitter": True})
    jittered = [summarize(run_config(jittered_config, jitter_rng=np.random.default_rng(k)), slo)
                for k in range(jitter_runs)]
    size = len(summaries)
    groups = [spread(jittered[i:i + size]) for i in range(0, jitter_runs - size + 1, size)]
    ratio = float(np.median([r for _, r in served]))
    scaled = run_config(mode_config(config, "simulate"),
                        cost=ScaledCost(calibrated_cost(run), ratio))
    plain = run_config(mode_config(config, "simulate"))  # the simulation without calibration
    return {"simulate": error_rows(name, median, summarize(plain, slo)),
            "calibrated": error_rows(name, median, summarize(run.simulate, slo)),
            "jitter": error_rows(name, median, median_summary(jittered)) if jittered else None,
            "scaled": error_rows(name, median, summarize(scaled, slo)),
            "spread": as_rows(name, median, spread(summaries)),
            "jitter_spread": as_rows(name, median, median_summary(groups)) if groups else None}


def machine_state() -> str:
    """The machine right now: its load average and how fast it runs a fixed Python loop."""
    t0 = time.perf_counter()
    total = 0
    for i in range(2_000_000):
        total += i
    return (f"load average {os.getloadavg()[0]:.2f}, a 2,000,000-iteration Python loop "
            f"{time.perf_counter() - t0:.3f} s")


def main(args) -> int:
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    tables, notes, verdicts = {}, [], []
    for scenario, load, capacity in build_scenarios(out_dir, args.requests, args.only):
        before = machine_state()
        run = validate(scenario, out_dir / scenario.name, progress=True, calibrate=True,
                       profile="auto").runs[0]
        served = servings(run, args.repeats)
        results = compare(scenario.name, run, served, args.jitter_runs)
        for key, rows in results.items():
            tables.setdefault(key, []).append((scenario.name, rows))
        n = scenario.base.workload.num_requests
        stats = ("p50", "p90", "p99") if n >= P99_REQUESTS else ("p50", "p90")
        verdicts.append((scenario.name, target_verdict(results["simulate"], results["spread"],
                                                       stats) if args.repeats > 1 else None))
        ratios = ", ".join(f"{r:.2f}" for _, r in served)
        notes.append(f"{scenario.name}: {n} requests at {load:.0%} of {capacity:.1f} req/s, "
                     f"{len(run.steps)} steps; the reference step took {run.calibration:.2f}x its "
                     f"profiled time just before the first serving; served steps took {ratios}x "
                     f"the calibrated prediction (per serving); "
                     f"{int(sum(run.serve.step_columns()['preemptions']))} preemptions in the "
                     f"first serving; machine before: {before}; after: {machine_state()}")
    metrics, _ = HEADLINE
    # p99 counts here at any size (the target leaves it out below P99_REQUESTS requests)
    headline = f"max |error| over p50/p90/p99 of {', '.join(m.upper() for m in metrics)}"
    print(f"\nsimulate vs the median of {args.repeats} servings, error % = 100 (simulate - "
          f"serve) / serve (OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}, "
          f"this machine's profile of each scenario's model):\n")
    print(table_text(tables["simulate"]))
    print(f"\n{headline}: {worst(tables['simulate']):.1f}%")
    if args.repeats > 1:
        print(f"\nnoise floor: spread of the {args.repeats} servings, 100 (max - min) / median "
              f"(the same requests, served again):\n")
        print(table_text(tables["spread"]))
        print("\ntarget (within 5% where the servings agree within 5%, else within their "
              "spread):")
        for name, (ok, failing) in verdicts:
            print(f"  {name}: {'met' if ok else 'not met: ' + failing}")
    print("\n" + "\n".join(notes))
    print("\nsimulate calibrated to the machine's speed just before the first serving (the "
          "profile's reference step timed for a few seconds; validate --calibrate) vs the same "
          "median:\n")
    print(table_text(tables["calibrated"]))
    print(f"\n{headline}: {worst(tables['calibrated']):.1f}%\n")
    print(f"\nsimulate with the profiled machine's jitter (cost.jitter; median of "
          f"{args.jitter_runs} realisations) vs the median of the servings:\n")
    print(table_text(tables["jitter"]))
    print(f"\n{headline}: {worst(tables['jitter']):.1f}%")
    if args.repeats > 1 and tables["jitter_spread"][0][1] is not None:
        print(f"\nthe jittered simulation's own noise floor: median spread of its realisations "
              f"taken {args.repeats} at a time (compare with the servings' above):\n")
        print(table_text(tables["jitter_spread"]))
    print("\ndiagnostic: the simulation with every step cost scaled by the median over the "
          "servings of their steps' total measured / predicted time (the machine's speed while "
          "serving):\n")
    print(table_text(tables["scaled"]))
    print(f"\n{headline}: {worst(tables['scaled']):.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main(ARGS))
