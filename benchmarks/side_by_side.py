"""This checkout's simulator beside another checkout's (an earlier version), in one sitting.

Each part is timed in a fresh process per run, the two checkouts alternating in ABBA order
(this, other, other, this, ...) so that the machine's drift falls on both equally; each pair
gives a ratio (this / other), and the medians, the ratios' median and range, and whether every
run of both checkouts recorded the very same values (a digest of every step and request
column) are printed.

- replay: the whole Azure conversation trace at its real rate (`azure-conv-real-rate.toml`),
  the simulation alone;
- replay-whole: the same as a user runs it, `servesim run` timed as a whole process;
- saturated: the trace replayed 1.5x faster than the large server serves it (`sim_speed.py`'s
  saturated part), the simulation alone;
- synthetic: `--requests` requests with lognormal lengths at the same overload
  (`sim_speed.py`'s synthetic part), the simulation alone.

Each checkout is run with its own code and its own `benchmarks/sim_speed.py` (which builds the
saturated and synthetic configs), so a checkout from before a change to the config's shape
runs as it did.

    python benchmarks/side_by_side.py --other ../servesim-before
    python benchmarks/side_by_side.py --other ../servesim-before --pairs 8 --big-pairs 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sim.cli.flag_types import positive_integer

HERE = Path(__file__).resolve().parent
PARTS = ("replay", "replay-whole", "saturated", "synthetic")

# Run inside a checkout (its root on sys.path, its benchmarks/ too): one part, once; prints
# {"wall_s", "digest", "requests", "steps"} as the last line.
CHILD = r"""
import hashlib, json, sys, time
from pathlib import Path
root, part, requests = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
sys.path[:0] = [str(root), str(root / "benchmarks")]
import sim_speed
from sim.runner import run_config
if part == "replay":
    import scenarios
    config = scenarios.load(root / "benchmarks" / "azure-conv-real-rate.toml").runs()[0].config
else:
    arrivals = sim_speed.load_trace(sim_speed.TRACE).arrival_s
    rate = sim_speed.OVERLOAD * sim_speed.service_rate()
    config = (sim_speed.trace_config(len(arrivals) / arrivals[-1] / rate) if part == "saturated"
              else sim_speed.synthetic_config(requests, rate))
t0 = time.perf_counter()
recorder = run_config(config)
wall_s = time.perf_counter() - t0
digest = hashlib.sha256()
for value in sim_speed._records(recorder):
    digest.update(value if isinstance(value, bytes) else value.encode())
print(json.dumps({"wall_s": wall_s, "digest": digest.hexdigest(),
                  "requests": recorder.num_requests, "steps": recorder.num_steps}))
"""


def run_once(root: Path, part: str, requests: int) -> dict:
    """One timed run of `part` in the checkout at `root`, in a fresh process."""
    env = dict(os.environ, PYTHONPATH=str(root))
    if part == "replay-whole":
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "sim.cli", "run",
                            str(root / "benchmarks" / "azure-conv-real-rate.toml"), "--out",
                            str(Path(tmp) / "out"), "--quiet"], check=True, cwd=root, env=env,
                           stdout=subprocess.DEVNULL)
            wall_s = time.perf_counter() - t0
            digest = _file_digest(Path(tmp) / "out" / "requests.csv")
        return {"wall_s": wall_s, "digest": digest}
    out = subprocess.run([sys.executable, "-c", CHILD, str(root), part, str(requests)],
                         check=True, cwd=root, env=env, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def _file_digest(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def compare(part: str, this: Path, other: Path, pairs: int, requests: int) -> dict:
    """`pairs` ABBA pairs of runs of `part`: each checkout's wall times, the ratios this/other,
    and whether every run recorded the same values."""
    times = {"this": [], "other": []}
    digests = set()
    for i in range(pairs):
        order = (("this", this), ("other", other)) if i % 2 == 0 else \
            (("other", other), ("this", this))
        for name, root in order:
            result = run_once(root, part, requests)
            times[name].append(result["wall_s"])
            digests.add(result["digest"])
    ratios = [a / b for a, b in zip(times["this"], times["other"])]
    return {"part": part, "this_s": times["this"], "other_s": times["other"],
            "ratios": ratios, "identical": len(digests) == 1}


def show(result: dict) -> None:
    ratios = result["ratios"]
    print(f"{result['part']:>13}: this {statistics.median(result['this_s']):7.2f} s, "
          f"other {statistics.median(result['other_s']):7.2f} s (medians of "
          f"{len(ratios)}); this/other median {statistics.median(ratios):.3f} "
          f"(range {min(ratios):.3f}-{max(ratios):.3f}); records "
          f"{'identical' if result['identical'] else 'DIFFER'}", flush=True)


def machine_state() -> str:
    sys.path.insert(0, str(HERE))
    from sim_speed import machine_state as state

    return state()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--other", type=Path, required=True,
                        help="the root of the other checkout (e.g. a git worktree of an "
                             "earlier commit)")
    parser.add_argument("--pairs", type=positive_integer, default=6,
                        help="ABBA pairs of the replay and saturated parts (default 6)")
    parser.add_argument("--big-pairs", type=positive_integer, default=2,
                        help="pairs of the synthetic part (default 2)")
    parser.add_argument("--requests", type=positive_integer, default=1_000_000,
                        help="synthetic workload size (default 1,000,000)")
    parser.add_argument("--only", choices=PARTS, action="append", help="run only this part")
    args = parser.parse_args(argv)
    this, other = HERE.parent, args.other.resolve()
    if not (other / "sim").is_dir():
        parser.error(f"--other {args.other}: not a servesim checkout (no sim/ folder)")
    print(f"this: {this}; other: {other}; {machine_state()}", flush=True)
    for part in args.only or PARTS:
        pairs = args.big_pairs if part == "synthetic" else args.pairs
        show(compare(part, this, other, pairs, args.requests))
    print(f"after: {machine_state()}")


if __name__ == "__main__":
    main()
