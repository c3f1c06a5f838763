"""The flags a `vllm bench serve` or GuideLLM user reaches for, mapped onto scenario keys.

    --request-rate R     workload.arrival: Poisson at R requests/s, the gaps rescaled so that the
                         last request goes out at num_prompts / R, as vLLM sends them
                         (`fixed_span`); inf: every request at t=0
    --burstiness B       with a rate: gamma gaps of the same mean, coefficient of variation
                         1/sqrt(B) (vLLM's burstiness: 1 is Poisson, lower is burstier);
                         `servesim search` takes it alone, and refuses --request-rate (it
                         varies the rate itself)
    --max-concurrency C  workload.max_concurrency: at most C requests in flight, the others
                         wait for a slot (their latencies start when sent); without
                         --request-rate every request arrives at once (vLLM's default rate,
                         inf), except where the scenario gives them (a timed trace, a
                         search, variants, a sweep or a --set of them), each run keeping
                         its own; a ShareGPT file gives lengths only, so it is sent at once
    --num-prompts N      workload.num_requests (a trace: workload.trace.max_requests;
                         multi-turn sessions: workload.sessions.conversations)
    --random-input-len N, --random-output-len M, --random-range-ratio R (vLLM's random
                         dataset; --input-len and --output-len are the same): every prompt N
                         tokens (workload.prompt_tokens = { dist = "fixed", value = N }),
                         every output M; with R > 0 uniform from floor(N(1 - R)) to
                         ceil(N(1 + R)) (an output at least 1), as vLLM draws them
    --seed S             seed
    --goodput ttft:MS tpot:MS e2el:MS   goodput counts the requests that meet these SLOs and
                         no others (slo.*_s; the SLOs not named are set to false), as in
                         vLLM; without it, the scenario's SLOs
    --max-seconds S      workload.max_seconds: no arrival after S seconds
    --warmup-seconds S   workload.warmup_s: requests arriving earlier are left out of the figures
    --sweep KEY=V1,V2,.. a sweep of a dotted key, crossed with the scenario's variants

Each becomes a (dotted key, value) override applied after the scenario file and `--set`, so a
flag says the same thing as the `--set` it stands for, and the scenario records it.
"""

from __future__ import annotations

import math
from argparse import ArgumentTypeError

from .flag_types import (FlagError, non_negative_number, positive_integer, positive_number,
                         range_ratio, rate, seed_value)
from .flag_values import sweep_flags

GOODPUT_KEYS = {"ttft": "ttft_s", "tpot": "tpot_s", "e2el": "e2e_s"}


def add_workload_flags(parser, searching: bool = False) -> None:
    """The flags above; `searching`: as `servesim search` reads them, which varies the rate."""
    group = parser.add_argument_group("workload and statistics (as in vllm bench serve)")
    group.add_argument("--request-rate", metavar="R", type=rate,
                       help="refused: the search varies the rate (search.rate)" if searching
                       else "Poisson arrivals at R requests/s, the last at num_prompts / R as "
                            "vLLM sends them; inf: every request at once")
    group.add_argument("--burstiness", metavar="B", type=positive_number,
                       help=("gamma gaps at every rate searched" if searching else
                             "with --request-rate: gamma gaps")
                       + ", coefficient of variation 1/sqrt(B) (1: Poisson)")
    group.add_argument("--max-concurrency", metavar="C", type=positive_integer,
                       help="at most C requests in flight; the others wait for a slot and "
                            "their latencies start when sent (without --request-rate: every "
                            "request at once, unless the scenario gives the arrivals: a "
                            "trace, search, variants, sweep or --set)")
    group.add_argument("--num-prompts", metavar="N", type=positive_integer,
                       help="requests to send (multi-turn sessions: conversations)")
    group.add_argument("--random-input-len", "--input-len", dest="input_len", metavar="N",
                       type=positive_integer, help="every prompt N tokens (vLLM's random "
                       "dataset; workload.prompt_tokens)")
    group.add_argument("--random-output-len", "--output-len", dest="output_len", metavar="M",
                       type=positive_integer, help="every output M tokens "
                       "(workload.output_tokens)")
    group.add_argument("--random-range-ratio", dest="range_ratio", metavar="R",
                       type=range_ratio, help="with the lengths above: each drawn uniformly "
                       "from floor(N(1 - R)) to ceil(N(1 + R)), 0 <= R < 1 (default 0)")
    group.add_argument("--seed", metavar="S", type=seed_value, help="the scenario's seed")
    group.add_argument("--goodput", nargs="+", action="extend", metavar="METRIC:MS",
                       help="goodput counts the requests meeting these SLOs, e.g. ttft:500 "
                            "tpot:50 e2el:5000 (milliseconds), and no other (default: the "
                            "scenario's SLOs)")
    group.add_argument("--max-seconds", metavar="S", type=positive_number,
                       help="stop arrivals after S seconds")
    group.add_argument("--warmup-seconds", metavar="S", type=non_negative_number,
                       help="leave requests arriving in the first S seconds out of the figures")
    group.add_argument("--sweep", action="append", metavar="KEY=V1,V2,...",
                       help="sweep a dotted key over values (repeatable; values are TOML)")


def flag_overrides(args, scenario_of) -> tuple[list, dict, dict]:
    """([(dotted key, value)], {dotted key: [values]}, {dotted key: the flag that set it}):
    what the flags stand for. `scenario_of(pairs, flags)` is the scenario loaded with those
    overrides (which key --num-prompts sets, whether arrivals come from a trace or a sweep)."""
    pairs, flags = [], {}
    sweep = sweep_flags(args.sweep or ())

    def put(flag: str, key: str, value) -> None:
        pairs.append((key, value))
        flags[key] = flag

    rate, burst = getattr(args, "request_rate", None), getattr(args, "burstiness", None)
    searching = getattr(args, "command", None) == "search"
    if searching and rate is not None:
        raise FlagError("--request-rate: servesim search varies the arrival rate itself, from "
                        "search.rate's low to its high; drop the flag (--burstiness B alone: "
                        "gamma arrivals at every rate searched)")
    if burst is not None and rate is None and not searching:
        raise FlagError("--burstiness needs --request-rate")
    if burst is not None:
        check_burstiness(burst)
        if rate == math.inf and burst != 1:
            raise FlagError(f"--burstiness {burst:g}: --request-rate inf sends every request "
                            f"at once, with no gaps to shape; give a finite rate")
    if rate is not None:
        arrival = arrival_of(rate, burst)
        span = arrival.pop("fixed_span", None)
        put("--request-rate", "workload.arrival", arrival)
        if span is not None:  # a pair of its own: a rate that every variant sets again is
            put("--request-rate", "workload.arrival.fixed_span", span)  # refused, changing no run
    elif burst is not None:  # a search: the shape of the gaps, at every rate it probes
        for key, value in gaps_of(burst).items():
            put("--burstiness", f"workload.arrival.{key}", value)
    if args.max_concurrency is not None:
        if rate is None and not arrivals_of_scenario(scenario_of, pairs, flags, sweep, searching):
            put("--max-concurrency", "workload.arrival", {"process": "burst"})  # rate inf
        put("--max-concurrency", "workload.max_concurrency", args.max_concurrency)
    if args.num_prompts is not None:
        put("--num-prompts", scenario_of(pairs, flags).base.workload.count_key, args.num_prompts)
    for key, flag, length in length_flags(args):
        put(flag, key, length)
    if args.seed is not None:
        put("--seed", "seed", args.seed)
    for key, value in goodput_pairs(args.goodput):
        put("--goodput", key, value)
    if args.max_seconds is not None:
        put("--max-seconds", "workload.max_seconds", args.max_seconds)
    if args.warmup_seconds is not None:
        put("--warmup-seconds", "workload.warmup_s", args.warmup_seconds)
    return pairs, sweep, flags


def refuse_closed_loop(scenario) -> None:
    """FlagError for --max-concurrency alone on a closed loop: its burst would replace the
    loop's users and their think time, where its concurrency is what the flag means."""
    arrival = scenario.base.workload.arrival
    if arrival is not None and arrival.process == "closed_loop":
        raise FlagError(f"--max-concurrency: the scenario's arrivals are a closed loop of "
                        f"{arrival.concurrency} users, whose number is "
                        f"workload.arrival.concurrency (--set workload.arrival.concurrency=N "
                        f"keeps their think time; --request-rate R with --max-concurrency "
                        f"replaces the loop)")


def arrivals_of_scenario(scenario_of, pairs: list, flags: dict, sweep: dict,
                         searching: bool) -> bool:
    """`arrivals_given` of the scenario with the overrides so far (a closed loop's refused,
    `refuse_closed_loop`, unless searching); False where it loads only once the flag gives it
    arrivals (a ShareGPT trace with no `workload.arrival`), and the scenario's own error where
    it loads neither way."""
    from scenarios import ScenarioError

    try:
        scenario = scenario_of(pairs, flags)
    except ScenarioError as refused:
        burst = [("workload.arrival", {"process": "burst"})]
        try:
            scenario_of(pairs + burst, flags | {"workload.arrival": "--max-concurrency"})
        except ScenarioError:
            raise refused from None
        return False
    if not searching:
        refuse_closed_loop(scenario)
    return arrivals_given(scenario, sweep, searching)


def arrivals_given(scenario, sweep: dict, searching: bool) -> bool:
    """Whether the scenario gives the arrivals, which --max-concurrency alone then leaves as
    they are: a timed trace (a ShareGPT file gives lengths only), a search of the rate, or what
    its overrides (--set), any of the file's variants (picked by --variant or not) or a sweep
    (the file's, the flags' `sweep`) write."""
    from scenarios.defaults import UNTIMED_TRACE_FORMATS
    from scenarios.writes import overlap, swept_writes, writes

    written = [w for variant in scenario.file_variants for w in writes(variant.set)]
    written += [w for key, value in scenario.overrides for w in writes({key: value})]
    written += [w for key, values in {**scenario.sweep, **sweep}.items()
                for w in swept_writes(key, values)]
    trace = scenario.base.workload.trace
    return ((trace is not None and trace.format not in UNTIMED_TRACE_FORMATS)
            or (searching and scenario.base.search is not None)
            or any(overlap(w, "workload.arrival") for w in written))


def arrival_of(rate: float, burst: float | None) -> dict:
    """The arrival table of --request-rate R [--burstiness B]."""
    if math.isinf(rate):
        return {"process": "burst"}
    process, *cv = gaps_of(burst).items()
    return dict([process, ("rate", rate), *cv])  # the order the docs write it in


LENGTH_FLAGS = (("input_len", "--random-input-len", "workload.prompt_tokens", 0),
                ("output_len", "--random-output-len", "workload.output_tokens", 1))


def length_flags(args) -> list:
    """[(dotted key, flag, length table)] of --random-input-len / --random-output-len and
    --random-range-ratio: vLLM's random dataset's lengths, drawn as it draws them (uniform over
    whole numbers from floor(N(1 - R)) to ceil(N(1 + R)), an output at least 1)."""
    ratio = getattr(args, "range_ratio", None)
    given = [(key, flag, getattr(args, name), least) for name, flag, key, least in LENGTH_FLAGS
             if getattr(args, name, None) is not None]
    if ratio is not None and not given:
        raise FlagError("--random-range-ratio needs --random-input-len or --random-output-len "
                        "(it widens the lengths they give)")
    out = []
    for key, flag, length, least in given:
        if not ratio:
            out.append((key, flag, {"dist": "fixed", "value": length}))
            continue
        low = max(math.floor(length * (1 - ratio)), least)
        if low < 1:
            raise FlagError(f"{flag} {length} with --random-range-ratio {ratio:g}: the "
                            f"shortest prompt would be {low} tokens; a prompt holds at least 1")
        high = math.ceil(length * (1 + ratio))
        out.append((key, f"{flag} and --random-range-ratio",
                    {"dist": "uniform", "low": low, "high": high}))
    return out


def check_burstiness(burst: float) -> None:
    """FlagError unless the gaps' coefficient of variation 1/sqrt(B) is one a gamma process
    can draw (`workload.arrival.cv`'s range: beyond it the gaps underflow)."""
    from scenarios.defaults import GAMMA_CV

    low, high = 1 / GAMMA_CV[1] ** 2, 1 / GAMMA_CV[0] ** 2
    if not low <= burst <= high:
        raise FlagError(f"--burstiness: must be from {low:g} to {high:,.0f} (gaps with a "
                        f"coefficient of variation 1/sqrt(B) from {GAMMA_CV[0]:g} to "
                        f"{GAMMA_CV[1]:g}), got {burst:g}")


def gaps_of(burst: float | None) -> dict:
    """The process (and cv) of the gaps --burstiness B asks for, at any rate: Poisson at 1;
    rescaled to end at num_prompts / rate, as vLLM sends them (`fixed_span`)."""
    if burst is not None and burst != 1:
        return {"process": "gamma", "cv": 1 / math.sqrt(burst), "fixed_span": True}
    return {"process": "poisson", "fixed_span": True}


def goodput_pairs(items) -> list:
    """The SLO overrides of --goodput METRIC:MS ...: the named limits, and false (no SLO) for
    every other, so goodput counts exactly the SLOs named (vLLM's --goodput)."""
    if not items:
        return []
    limits = {}
    for item in items:
        metric, sep, value = item.partition(":")
        if not sep or metric not in GOODPUT_KEYS:
            raise FlagError(f"--goodput {item}: expected METRIC:MS with METRIC one of "
                            f"{', '.join(GOODPUT_KEYS)}")
        if GOODPUT_KEYS[metric] in limits:
            raise FlagError(f"--goodput {item}: {metric} is given twice; give it once")
        try:
            milliseconds = positive_number(value)
        except ArgumentTypeError:
            raise FlagError(f"--goodput {item}: must be a positive number of "
                            f"milliseconds") from None
        limits[GOODPUT_KEYS[metric]] = milliseconds / 1000.0
    return [(f"slo.{key}", limits.get(key, False)) for key in GOODPUT_KEYS.values()]
