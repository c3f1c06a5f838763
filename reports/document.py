"""The report's content as blocks (see render.py), in the order a newcomer reads it: what was
run (each variant's own settings, and what the runs noted: a fallback to the roofline, say),
the summary, then, for a workload with priorities, its main finding (latency by priority
class), the charts, and the rejected requests summarized by reason.
"""

from __future__ import annotations

import re

import numpy as np

from engine.benchmark import latency_percentiles
from scenarios.sweep import point_text

from .describe import sweep_table, variant_table, what_was_run
from .key_figures import REPORT_FIGURES, key_rows
from .render import Heading, Image, Paragraph, Table
from .tables import label_values, run_keys
from .vllm_json import summary_json_names

EXAMPLES_LISTED = 5  # request ids shown per reason; requests.csv has every one


GLOSSARY = (
    "Latencies in milliseconds (docs/benchmark/metrics.md). TTFT: arrival to first token. "
    "TPOT: a request's time per output token after the first, (E2E - TTFT) / (output tokens "
    "- 1), one value a request. ITL: every gap between two tokens of a request, weighted by "
    "token, so a request's wait behind another's prefill shows in ITL's tail more than in "
    "TPOT. E2E: arrival to last token. req/s: requests completed over the run's duration "
    "(first arrival, or the warm-up's end, to last finish: the drain included); goodput: "
    "those a second that met every SLO. Prefix cache hit %: the share of prompt tokens found "
    "cached at each request's first admission.")
# and where a run splits prefill from decode
DISAGGREGATED_TTFT = (
    "Under prefill/decode disaggregation TTFT is the prefill replica's first token "
    "(DistServe's); a client behind a P/D proxy, as vLLM's, gets its first token from the "
    "decode replica after the KV transfer: `decode_first_token_s - arrival_s` in requests.csv "
    "(docs/sim/cluster.md).")


def report_blocks(scenario, specs, summaries, requests, charts: list[Image],
                  remote: str | None = None, notes=()) -> list:
    """`requests`: the requests table (reports.tables.requests_table). `remote`: what was
    benchmarked, for runs without steps (`sim.bench`). `notes`: [(note, run labels)] the runs
    told their user (`writer.run_notes`)."""
    blocks = [Heading(1, f"servesim report: {scenario.name}")]
    if scenario.description:
        blocks.append(Paragraph(scenario.description))
    blocks += [Heading(2, "What was run"), Table(["setting", "value"],
                                                 what_was_run(scenario, specs))]
    if remote is not None:
        blocks.append(Paragraph(remote))
    if len(scenario.variants) > 1 or scenario.variants[0].set:
        blocks += [Heading(3, "Variants"), Table(*variant_table(scenario, specs))]
    if scenario.sweep:
        rows = [[f"`{key}`", ", ".join(map(point_text, values))]
                for key, values in scenario.sweep.items()]
        blocks += [Heading(3, "Sweep (crossed with every variant)"),
                   Table(["key", "values"], rows)]
        points = sweep_table(scenario, specs)
        if points is not None:
            blocks += [Paragraph("What changes with the sweep, run by run:"),
                       Table(*points)]
    if notes:
        every = len(specs)
        blocks += [Heading(3, "Notes from the runs"), Table(
            ["note", "runs"], [[note.removeprefix("note: "),
                                "every run" if len(labels) == every else ", ".join(labels)]
                               for note, labels in notes])]
    header, rows = key_rows(specs, summaries, REPORT_FIGURES)
    files = summary_json_names(specs)
    named = f"`{files[0]}`" if len(files) == 1 else \
        f"`{files[0]}` to `{files[-1]}`, one a run"
    split = any(spec.config.cluster is not None and spec.config.cluster.prefill_replicas
                for spec in specs)
    glossary = GLOSSARY + (" " + DISAGGREGATED_TTFT if split else "")
    blocks += [Heading(2, "Summary"), Table(header, rows), Paragraph(glossary),
               Paragraph("Every figure (mean, p50, p90, p95, p99 and max of TTFT, TPOT, ITL, E2E "
                         "and queueing, goodput, batch size, KV use, prefix cache hit rates and "
                         "prefill tokens saved) is in `summary.csv`; each run's figures are also "
                         f"in vLLM `bench serve`'s result layout ({named}); "
                         + _row_files(remote is None, remote is None and any(
                             spec.config.cluster is not None for spec in specs)))]
    blocks += priority_blocks(specs, requests)
    blocks += [Heading(2, "Charts")]
    for image in charts:
        blocks += [Heading(3, image.alt), image]
    blocks += rejected_blocks(specs, requests)
    return blocks


def _row_files(stepped: bool, cluster: bool) -> str:
    """Where the report's rows are: the requests', the steps' (runs with steps of their own:
    not a remote server's) and a cluster's replicas'."""
    files = ["per-request rows are in `requests.csv`"]
    if stepped:
        files.append("per-step rows in `steps.csv`")
    if cluster:
        files.append("per-replica rows in `replicas.csv`")
    return (", ".join(files[:-1]) + " and " + files[-1] if len(files) > 1 else files[0]) + "."


def _run_groups(specs, requests) -> list:
    """[(spec, its rows of `requests`)] in run order (a run without requests is left out)."""
    keys = _run_columns(specs)
    groups = {tuple(map(str, labels if isinstance(labels, tuple) else (labels,))): group
              for labels, group in requests.groupby(keys, sort=False, dropna=False)}
    out = []
    for spec in specs:
        group = groups.get(tuple(map(str, label_values(spec, keys))))
        if group is not None:
            out.append((spec, group))
    return out


def _run_columns(specs) -> list[str]:
    """The columns that name a run: `variant` and the sweep keys (not a cluster's `replica`,
    which names a request's server within a run)."""
    return run_keys([(spec, None) for spec in specs])


def priority_blocks(specs, requests) -> list:
    """TTFT and E2E by priority class, when the workload has more than one: classes in the
    order a priority queue serves them (the lowest value first)."""
    if requests["priority"].nunique() < 2:
        return []
    keys = _run_columns(specs)
    rows = []
    for spec, run in _run_groups(specs, requests[requests["counted"]]):  # as the summary
        for priority, group in run.groupby("priority", sort=True):  # lowest value first
            done = group[group["status"] == "finished"]
            row = [str(v) for v in label_values(spec, keys)]
            row += [spec.config.scheduler.queue, str(priority), str(len(group)),
                    str(len(done))]
            for column in ("ttft_s", "e2e_s"):
                pct = latency_percentiles(done[column].to_numpy(dtype=np.float64), (50, 99))
                row += [_ms(pct[50]), _ms(pct[99])]
            rows.append(row)
    header = keys + ["queue", "priority", "requests", "finished", "TTFT p50 ms", "TTFT p99 ms",
                     "E2E p50 ms", "E2E p99 ms"]
    note = ("A `priority` queue admits the waiting request with the lowest priority value first "
            "(0 before 1; equal values in arrival order), so the lowest class should see the "
            "shortest TTFT; an `fcfs` queue ignores priorities and serves in arrival order. "
            "Classes are listed in the order a priority queue serves them; the requests "
            "counted are the summary's (those sent after any warm-up).")
    return [Heading(2, "Latency by priority class"), Paragraph(note), Table(header, rows)]


def _ms(value_s: float) -> str:
    return "n/a" if np.isnan(value_s) else f"{1e3 * value_s:.1f}"


def rejected_blocks(specs, requests) -> list:
    """Rejected requests per run (a benchmark's failed ones: a client sees no rejection), one
    row per kind of reason: how many, and a few ids."""
    status = "failed" if (requests["status"] == "failed").any() else "rejected"
    blocks = [Heading(2, f"{status.capitalize()} requests")]
    if not (requests["status"] == status).any():
        return blocks + [Paragraph("None: every request could be served.")]
    keys = _run_columns(specs)
    rows = []
    for spec, run in _run_groups(specs, requests):
        rejected = run[run["status"] == status]
        for members in by_kind(zip(rejected["request_id"], rejected["reject_reason"])):
            ids = [str(request_id) for request_id, _ in members]
            shown = ", ".join(ids[:EXAMPLES_LISTED]) + (", ..." if len(ids) > EXAMPLES_LISTED
                                                         else "")
            rows.append([str(v) for v in label_values(spec, keys)]
                        + [reason_summary([reason for _, reason in members]), str(len(ids)),
                           shown])
    note = (FAILED_NOTE if status == "failed" else
            "A request that can never run under a run's settings is rejected when it arrives, "
            "never dropped silently.") + (
            " Reasons of one kind are counted together, the numbers that differ between them "
            f"given as their range; every {status} request is in `requests.csv` with status "
            f"`{status}` and its `reject_reason`.")
    return blocks + [Paragraph(note),
                     Table(keys + ["reason", "requests", "example request ids"], rows)]


FAILED_NOTE = ("A benchmarked request whose answer was an error, malformed, cut short or "
               "missing failed alone, with its reason; the others were measured.")


def rejection_text(results) -> str:
    """A line for each run and kind of reason its requests were rejected for, with how many
    ("" when none was): what the console prints below the key figures."""
    lines = []
    for spec, recorder in results:
        for members in by_kind(recorder.reject_reasons.items()):
            count = f"{len(members)} request{'s' if len(members) > 1 else ''}"
            reasons = [reason for _, reason in members]
            lines.append(f"{spec.label}: {count} rejected: {reason_summary(reasons)}")
    return "\n".join(lines)


def by_kind(rejected) -> list[list[tuple]]:
    """(request id, reason) pairs grouped by the kind of their reason (`reason_kind`), each
    group and the groups in the order first met."""
    kinds: dict = {}
    for request_id, reason in rejected:
        kinds.setdefault(reason_kind(reason), []).append((request_id, reason))
    return list(kinds.values())


def reason_kind(reason: str) -> str:
    """A reason with its numbers taken out: the reasons of one kind share it."""
    return re.sub(r"\d+", "#", reason)


def reason_summary(reasons: list[str]) -> str:
    """Reasons of one kind as one: each number that differs between them as its range
    (`prompt (4101–7433) + max_new_tokens (2–20) exceeds max_seq_len (4096)`)."""
    parts = [re.split(r"(\d+)", reason) for reason in reasons]
    out = []
    for position, piece in enumerate(parts[0]):
        if position % 2 == 0:  # text between numbers: the same in every reason of the kind
            out.append(piece)
            continue
        numbers = [int(p[position]) for p in parts]
        low, high = min(numbers), max(numbers)
        out.append(str(low) if low == high else f"{low}\u2013{high}")  # en dash, not minus
    return "".join(out)
