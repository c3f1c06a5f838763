"""Workloads: what the simulated server is asked to serve. Every request's arrival time,
prompt and output lengths and priority, built from a resolved `workload` table before the run.

- `arrivals.py`: open arrival processes (poisson, gamma, constant) and the closed loop;
- `distributions.py`: length and priority distributions;
- `traces/`: traces read from files (azure, mooncake, csv, jsonl, sharegpt), and the shipped ones;
- `sessions.py`: multi-turn chat sessions (conversations whose turns grow a shared prefix);
- `builder.py`: `build_workload(spec, rng)` and `seeded_streams(seed)`.
"""

from .arrivals import ClosedLoop, arrival_process
from .builder import STREAMS, Workload, build_workload, check_workload, seeded_streams
from .distributions import length_dist, priority_dist
from .sessions import SessionPlan, SessionTokens, check_turn_lengths
from .traces import Trace, load_trace

__all__ = ["ClosedLoop", "STREAMS", "SessionPlan", "SessionTokens", "Trace", "Workload",
           "arrival_process", "build_workload", "check_turn_lengths", "check_workload",
           "length_dist", "load_trace", "priority_dist", "seeded_streams"]
