"""Workloads: what the simulated server is asked to serve. Every request's arrival time,
prompt and output lengths and priority, built from a resolved config's workload before the run.
The arrival processes and length distributions are the scenario's own classes
(`scenarios.arrival`, `scenarios.lengths`); this package draws from them.

- `arrivals.py`: `Slots`, the requests sent as earlier ones finish (a closed loop's users, or
  an open process behind a cap on requests in flight);
- `traces/`: traces read from files (azure, mooncake, csv, jsonl, sharegpt), and the shipped ones;
- `sessions.py`: multi-turn chat sessions (conversations whose turns grow a shared prefix);
- `builder.py`: `build_workload(spec, rng)` and `seeded_streams(seed)`.
"""

from .arrivals import Slots
from .builder import STREAMS, Workload, build_workload, check_workload, seeded_streams
from .sessions import SessionPlan, SessionTokens, check_turn_lengths
from .traces import Trace, load_trace

__all__ = ["STREAMS", "SessionPlan", "SessionTokens", "Slots", "Trace", "Workload",
           "build_workload", "check_turn_lengths", "check_workload", "load_trace",
           "seeded_streams"]
