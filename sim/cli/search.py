"""`servesim search`: for every point of a scenario's `[search]` grid, the highest arrival rate
that meets its SLOs (`sim.search`), and the report of the capacities found.
"""

from __future__ import annotations

import sys
from functools import partial

from .common import (RunFailed, add_common_flags, add_parallel_flags, load_scenario, manifest,
                     output_dir, parallel_of, progress_lines)
from .flags import add_workload_flags


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("search", help="find the highest arrival rate that meets the "
                                                  "SLOs, for every point of a grid")
    parser.add_argument("scenario", help="built-in name or TOML path, with a [search] table")
    add_common_flags(parser, "output directory (default: out/<scenario name>-search/)")
    add_workload_flags(parser, searching=True)
    add_parallel_flags(parser, "grid points")
    parser.set_defaults(func=cmd_search)


def cmd_search(args) -> int:
    from reports.output import output_folder
    from reports.search_report import search_text, write_search_report

    from ..search import search, search_scenario

    scenario = search_scenario(load_scenario(args))
    parallel = parallel_of(args)
    args.out_dir = out_dir = output_dir(args.out, scenario.name, "-search")
    specs = scenario.runs()
    if not args.quiet:
        print(f"{scenario.name}: searching {len(specs)} points on "
              f"{parallel.describe(len(specs))}", file=sys.stderr)
    with output_folder(out_dir, manifest("search", scenario)) as folder:
        try:
            unit = "conversations/s" if any(spec.config.workload.sessions for spec in specs) \
                else "requests/s"
            result = search(scenario, parallel, progress_lines(
                scenario.name, specs, not args.quiet, partial(_capacity_text, unit=unit)))
        except (ValueError, FileNotFoundError) as exc:
            raise RunFailed(f"{scenario.name}: {exc}") from None
        files = write_search_report(result, folder)
    print(search_text(result))
    print(f"\n{len(files) + 1} files written to {out_dir}/; report: {out_dir / 'report.html'}")
    return 0


def _capacity_text(probes, unit: str) -> str:
    """A point's bisection in a few words, for the progress lines."""
    met = [probe.rate for probe in probes if probe.meets]
    if not met:
        return f"fails at {probes[0].rate:g} {unit}"
    bound = "at least " if len(probes) > 1 and probes[1].meets else ""
    return f"{bound}{max(met):.3g} {unit} ({len(probes)} simulations)"
