"""vLLM's result-file flags of `run` and `bench`, as `vllm bench serve` reads them:

    --metric-percentiles P1,P2,...  the percentiles summary.json adds for each metric asked
                                    for, as `p<P>_<metric>_ms` (e.g. 25,50,75, or 99.9), each
                                    from 0 to 100
    --percentile-metrics M1,M2,...  which metrics get them: ttft, tpot, itl, e2el (default:
                                    all four)

They change what summary.json holds, not the runs, so they are not scenario keys; the manifest
records them. Whatever they say, every metric's mean, median, std, p90, p95 and p99 are
written (`reports.vllm_json.MetricPercentiles`).
"""

from __future__ import annotations

import math
from argparse import ArgumentTypeError

# vLLM's metric names (engine.vllm_figures.VLLM_METRICS, which loads NumPy: a command line is read
# before the BLAS threads are set, so nothing here may)
VLLM_METRICS = ("ttft", "tpot", "itl", "e2el")


def add_result_flags(parser) -> None:
    """The two flags above, in a group of their own."""
    group = parser.add_argument_group("result file (as in vllm bench serve)")
    group.add_argument("--metric-percentiles", metavar="P1,P2,...", type=percentile_list,
                       help="percentiles to add to summary.json for each metric of "
                            "--percentile-metrics, as p<P>_<metric>_ms (e.g. 25,50,75; from 0 "
                            "to 100); the mean, median, std, p90, p95 and p99 are always there")
    group.add_argument("--percentile-metrics", metavar="M1,M2,...", type=metric_list,
                       help=f"which metrics get --metric-percentiles: "
                            f"{', '.join(VLLM_METRICS)} (default: all)")


def result_percentiles(args):
    """The `reports.vllm_json.MetricPercentiles` the flags ask for. --percentile-metrics alone
    adds nothing: vLLM's default percentile, 99, is written for every metric already."""
    from reports.vllm_json import MetricPercentiles

    return MetricPercentiles(args.metric_percentiles or (),
                             args.percentile_metrics or VLLM_METRICS)


def percentile_list(text: str) -> tuple:
    """"25,50,99.9" -> (25.0, 50.0, 99.9): each a number from 0 to 100, none twice."""
    values = []
    for word in text.split(","):
        try:
            value = float(word)
        except ValueError:
            value = math.nan
        if not 0 <= value <= 100:
            raise ArgumentTypeError(f"must be numbers from 0 to 100, separated by commas "
                                    f"(e.g. 25,50,99.9), got {word.strip()!r}")
        if value in values:
            raise ArgumentTypeError(f"{word.strip()} is given twice")
        values.append(value)
    return tuple(values)


def metric_list(text: str) -> tuple:
    """"ttft,e2el" -> ("ttft", "e2el"): vLLM's metric names, none twice."""
    names = [word.strip() for word in text.split(",")]
    for name in names:
        if name not in VLLM_METRICS:
            raise ArgumentTypeError(f"must be metrics among {', '.join(VLLM_METRICS)}, "
                                    f"separated by commas, got {name!r}")
    if len(set(names)) < len(names):
        raise ArgumentTypeError(f"a metric is given twice in {text!r}")
    return tuple(names)
