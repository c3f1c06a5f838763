"""`bench(scenario, options, out_dir)`: replay each distinct workload of a scenario's runs
against an OpenAI-compatible server and write the report `servesim run` writes, less what
needs the server's steps, plus `bench_requests.csv` (each request's planned and reported token
counts, status and reason).

The runs of a scenario that differ only in engine settings send the same requests (the
settings do not reach a remote server), so each distinct (workload, seed) is sent once, under
its first run's label. The server is asked once, before the first run sends, for its model
(where none is named) and, for text prompts, how many tokens a word is (`Server`). Requests,
arrival times and prompt and output lengths come from the seed as in every mode. With
`workload.max_concurrency` C (`--max-concurrency`), at most C requests are in flight, as in
vLLM's `bench serve`: a request due while C are waits for one to end, and its latencies start
when it is sent; a closed loop of C users without think time is sent as every request at once
with at most C in flight.
"""

from __future__ import annotations

import asyncio
import csv
import functools
import math
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

from ..workloads import build_workload, seeded_streams
from .checked import one_line, printable
from .client import replay
from .discovery import first_model, prompt_token_counts
from .http_io import Target, check_api_key
from .prompts import PROBE_WORDS, TextScale, fit_text_scale, id_prompts, probe_text, text_prompt
from .recorder import BenchRecorder
from .timing import RequestResult, max_in_flight
from .urls import check_base_url, check_endpoint, is_chat, shown_url

DEFAULT_TIMEOUT_S = 600.0
REQUEST_CSV_COLUMNS = ("request_id", "status", "reason", "planned_prompt_tokens",
                       "reported_prompt_tokens", "planned_output_tokens",
                       "reported_completion_tokens", "token_chunks")


@dataclass(frozen=True)
class BenchOptions:
    """How to reach the server and send: `prompt` "ids" or "text" (None: ids for completions,
    text for chat); `model` None: the first of GET /v1/models."""

    url: str
    endpoint: str = "/v1/completions"
    model: str | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    prompt: str | None = None
    progress: bool = False

    def __post_init__(self):
        for name, check in (("url", check_base_url), ("endpoint", check_endpoint)):
            try:
                check(getattr(self, name))
            except ValueError as exc:
                raise ValueError(f"{name} {exc}") from None
        check_api_key()

    @property
    def prompt_kind(self) -> str:
        return self.prompt or ("text" if is_chat(self.endpoint) else "ids")


@dataclass(frozen=True)
class BenchRun:
    """One replayed workload: its spec (mode "bench"), records, requests and notes."""

    spec: object
    recorder: BenchRecorder
    results: list
    notes: list
    max_in_flight: int


def distinct_runs(specs) -> list:
    """The runs of `specs` with a distinct (workload, seed), in order."""
    seen, runs = set(), []
    for spec in specs:
        key = (spec.config.workload, spec.config.seed)  # frozen settings: hashable
        if key not in seen:
            seen.add(key)
            runs.append(spec)
    return runs


def unbenchable(config) -> str | None:
    """Why a run's workload cannot be sent (a field and what is allowed), or None."""
    workload = config.workload
    if workload.sessions is not None:
        return ("workload.sessions: bench sends arrival times given up front; a "
                "conversation's turns (each sent when the last one ends) are not supported")
    if getattr(workload.arrival, "think_time_s", 0):
        return ("workload.arrival.think_time_s: bench sends each request at its arrival time "
                "or once a slot is free; a closed loop with think time is not supported (set "
                "it to 0, or use workload.max_concurrency)")
    return None


@dataclass(frozen=True)
class Server:
    """What bench asks the server once, before the first run sends: the model each request
    names (None: none) and, for text prompts, the tokens a word is (None: prompts of token
    ids), with the notes saying so."""

    model: str | None
    scale: TextScale | None
    notes: tuple


def server_once(options: BenchOptions):
    """A function returning the server's `Server`, which it asks at its first call: the runs
    call it once their workload is built, so a workload that cannot be built fails before the
    server is asked anything."""
    return functools.cache(lambda: asyncio.run(_meet(options)))


async def _meet(options: BenchOptions) -> Server:
    """Ask the server for its model, where `options` name none, and calibrate text prompts."""
    notes, model = [], options.model
    if model is None:
        try:
            model = await first_model(options.url, options.timeout_s)
        except ValueError as exc:
            notes.append(f"model: none named ({one_line(str(exc))})")
    if model is not None:
        notes.append(f"model: {model}")
    if options.prompt_kind != "text":
        return Server(model, None, tuple(notes))
    scale = await text_scale(Target(options.url, options.endpoint, model, options.timeout_s))
    return Server(model, scale, tuple(notes))


def bench_runs(scenario, options: BenchOptions) -> list[BenchRun]:
    base_dir = Path(scenario.path).parent if scenario.path else None
    server = server_once(options)
    return [bench_run(spec, options, server, base_dir)
            for spec in distinct_runs(scenario.runs())]


def bench_run(spec, options: BenchOptions, server, base_dir=None) -> BenchRun:
    """Send one run's workload; `server()` says what the server is (`server_once`). Its spec
    is returned in mode "bench"."""
    config = spec.config
    problem = unbenchable(config)
    if problem is not None:
        raise ValueError(problem)
    streams = seeded_streams(config.seed)
    workload = build_workload(config.workload, streams["workload"], base_dir)
    slots, concurrency = workload.closed_loop, None
    if slots is not None:  # a cap on requests in flight, or a closed loop's users
        arrivals = [0.0] * len(workload) if slots.arrival_s is None else slots.arrival_s.tolist()
        concurrency = slots.concurrency
    else:
        arrivals = workload.arrival_s.tolist()
    # priorities are sent where the workload draws them for a priority queue (a server without
    # priority scheduling answers 400 to any but 0, as vLLM does: the request fails, saying
    # so); under another queue the run ignores them, as the simulation does
    drawn = config.workload.priority is not None
    sent = drawn and config.scheduler.queue == "priority"
    priorities = workload.priority.tolist() if sent else [None] * len(workload)
    requests = [RequestResult(i, arrival_s, int(p), int(o), priority) for i, (arrival_s, p, o,
                priority) in enumerate(zip(arrivals, workload.prompt_tokens,
                                           workload.output_tokens, priorities))]
    facts = server()
    results, notes = asyncio.run(_send_all(options, facts, requests, workload,
                                           streams["tokens"], concurrency, spec.label))
    sent_any = [r for r in results if not math.isnan(r.sent_s)]
    if len(sent_any) < len(results):  # --max-seconds passed while they waited for a slot
        notes.append(f"{len(results) - len(sent_any)} requests not sent: workload.max_seconds "
                     f"passed while they waited for a slot")
        results = sent_any
    if sent:
        notes.append("priorities: each request's sent as its `priority`")
    elif drawn:
        notes.append(f"priorities: drawn but not sent (scheduler.queue is "
                     f"{config.scheduler.queue}, which ignores them)")
    return BenchRun(replace(spec, config=config.with_mode("bench")),
                    BenchRecorder(results, facts.model), results, notes + [token_check(results)],
                    max_in_flight(results))


async def _send_all(options: BenchOptions, server: Server, requests, workload, token_rng,
                    concurrency, label: str) -> tuple[list, list]:
    """(the requests sent, what the bench noted)."""
    notes = list(server.notes)
    target = Target(options.url, options.endpoint, server.model, options.timeout_s)
    if server.scale is None:
        prompts = id_prompts(workload.prompt_tokens, token_rng, workload.prompt_ids)
        notes.append("prompts: lists of token ids of the planned lengths" + (
            ", sharing the prefixes the trace shares" if workload.prompt_ids else ""))
    else:
        prompts = [text_prompt(r.request_id, r.planned_prompt_tokens, server.scale)
                   for r in requests]
        notes.append(f"prompts: text of repeated words, {server.scale.note}" + (
            "; they share none of the prefixes the trace shares (--prompt ids does)"
            if workload.prompt_ids else ""))
    bar = _bar(label, len(requests)) if options.progress else None
    try:
        until_s = workload.send_until_s
        results = await replay(target, requests, prompts, concurrency,
                               None if bar is None else lambda: bar.update(1),
                               math.inf if until_s is None else until_s)
    finally:
        if bar is not None:
            bar.close()
    return results, notes


async def text_scale(target: Target) -> TextScale:
    """The server's prompt tokens per word, from two probe requests (uncalibrated, saying
    why, when the probe fails)."""
    try:
        counts = await prompt_token_counts(target, {w: probe_text(w) for w in PROBE_WORDS})
        return fit_text_scale(counts)
    except ValueError as exc:
        return TextScale(note=f"not calibrated ({one_line(str(exc))}): one word is taken as "
                              f"one token")


def token_check(results) -> str:
    """How the server's reported token counts compare with the plan."""
    reported = [r for r in results if r.finished and r.prompt_tokens is not None]
    same = sum(r.prompt_tokens == r.planned_prompt_tokens for r in reported)
    outputs = sum(r.output_tokens == r.planned_output_tokens for r in results if r.finished)
    finished = sum(r.finished for r in results)
    failed = len(results) - finished
    return (f"{finished} of {len(results)} requests finished, {failed} failed; prompt tokens as "
            f"the server counted them: {same} of {len(reported)} reported equal the plan; "
            f"output tokens: {outputs} of {finished} equal max_tokens")


def write_request_csv(runs: list[BenchRun], path: Path) -> Path:
    """bench_requests.csv: each request's planned and reported counts, status and reason."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(["variant", *REQUEST_CSV_COLUMNS])
        for run in runs:
            for r in run.results:
                writer.writerow([run.spec.variant, r.request_id, r.status, r.reason,
                                 r.planned_prompt_tokens, _blank(r.prompt_tokens),
                                 r.planned_output_tokens, _blank(r.completion_tokens),
                                 len(r.chunk_s)])
    return path


def remote_text(options: BenchOptions, runs: list[BenchRun]) -> str:
    """The report's paragraph on what was benchmarked and what a client cannot see."""
    lines = [f"Benchmarked {shown_url(options.url).rstrip('/')}{options.endpoint} from the "
             f"client (streamed; max_tokens = the planned output length, with ignore_eos)."]
    for run in runs:
        lines.append(f"{run.spec.label}: " + "; ".join(run.notes)
                     + f"; at most {run.max_in_flight} requests were in flight.")
    lines.append("The server's steps are not visible to a client, so steps.csv and the "
                 "timeline are left out; batch size, KV use, queueing, preemption and prefix "
                 "cache figures are n/a. The model, engine, scheduler and cost settings "
                 "above describe the scenario, not the server. Each request's planned and reported "
                 "token counts, status and reason are in `bench_requests.csv`.")
    return printable(" ".join(lines))  # a model's name as the server gave it, on one line


def bench(scenario, options: BenchOptions, out_dir, manifest: dict | None = None,
          percentiles=None):
    """Bench every distinct workload of `scenario`; write the report to `out_dir` (whole or not
    at all); `percentiles`: vLLM's --metric-percentiles for summary.json
    (`reports.vllm_json.MetricPercentiles`). Returns (runs, `reports.ReportFiles`)."""
    from reports.output import output_folder

    manifest = manifest or {"command": "bench", "scenario": scenario.name}
    with output_folder(out_dir, manifest) as folder:
        runs = bench_runs(scenario, options)
        files = write_bench_report(scenario, runs, options, folder, percentiles)
    return runs, replace(files, out_dir=Path(out_dir))


def write_bench_report(scenario, runs: list[BenchRun], options: BenchOptions, folder: Path,
                       percentiles=None):
    """The report of `runs` in `folder`, and bench_requests.csv; returns `ReportFiles`."""
    import reports
    from reports.vllm_json import DATE_FORMAT, record_date

    results = [(run.spec, run.recorder) for run in runs]
    moded = replace(scenario, base=scenario.base.with_mode("bench"))
    date = record_date() or datetime.now().strftime(DATE_FORMAT)  # when, as vLLM's bench writes
    files = reports.write_report(moded, results, folder, date=date,
                                 remote=remote_text(options, runs), percentiles=percentiles)
    extra = write_request_csv(runs, Path(folder) / "bench_requests.csv")
    return replace(files, files=files.files + (extra,))


def _bar(label: str, total: int):
    """A progress bar of requests done, on a terminal."""
    import sys

    from tqdm import tqdm

    return tqdm(total=total, desc=f"bench {label}", unit="req", disable=not sys.stderr.isatty())


def _blank(value) -> str:
    return "" if value is None else str(value)
