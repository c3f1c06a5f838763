"""`servesim validate`: compare the simulation of a scenario with real serving, in-process
(`sim.validation`) or, with --against URL, with a bench of a running server
(`sim.validation.against`).
"""

from __future__ import annotations

from dataclasses import replace

from ..profiling import threads
from .client_flags import add_client_flags, bench_options
from .common import (RunFailed, UsageError, add_common_flags, add_parallel_flags, load_scenario,
                     manifest, output_dir, parallel_of)
from .flags import add_workload_flags


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("validate", help="compare simulate mode with real serving")
    parser.add_argument("scenario", help="built-in name or TOML path")
    add_common_flags(parser, "output directory (default: out/<scenario name>-validate/)",
                     "validate this variant only (default: every variant; with --against, "
                     "required when there are several: the server runs one of them)")
    add_workload_flags(parser)
    parser.add_argument("--profile", default="auto", metavar="auto|NAME|PATH",
                        help="the profile the simulation uses: auto (default) profiles this "
                             "machine once and reuses it from the cache; a shipped name or a "
                             "path must have been measured on this machine")
    parser.add_argument("--calibrate", action="store_true",
                        help="scale the simulation to the machine's speed measured just "
                             "before serving (the profile's reference step)")
    add_parallel_flags(parser, "runs", default="1: servings share no cores")
    parser.add_argument("--against", metavar="URL",
                        help="bench the OpenAI-compatible server at URL with the scenario's "
                             "requests instead of serving them in-process")
    add_client_flags(parser)
    parser.set_defaults(func=cmd_validate, blas_threads=blas_threads)


def blas_threads(args) -> int:
    """What the serving runs with: its profile's count (auto: the default, which the profile
    made for this machine is measured with)."""
    recorded = None if args.profile == "auto" else threads.recorded(args.profile)
    return recorded or threads.DEFAULT_THREADS


# the flags of one way to validate that the other has no use for: (flag, argument, unset)
IN_PROCESS_ONLY = (("--calibrate", "calibrate", False), ("--jobs", "jobs", None),
                   ("--ray", "ray", False), ("--ray-address", "ray_address", None))
CLIENT_ONLY = (("--endpoint", "endpoint", None), ("--model", "model", None),
               ("--timeout", "timeout", None), ("--prompt", "prompt", None))


def check_flags(args) -> None:
    """UsageError for a flag the chosen way ignores: the in-process serving's with --against,
    the HTTP client's without it."""
    if args.against is not None:
        for flag, name, unset in IN_PROCESS_ONLY:
            if getattr(args, name) != unset:
                raise UsageError(f"{flag}: with --against the server is benched from here, "
                                 f"not served in-process, so {flag} has nothing to act on; "
                                 f"drop it")
    else:
        for flag, name, unset in CLIENT_ONLY:
            if getattr(args, name) != unset:
                raise UsageError(f"{flag} is the HTTP client's, for --against URL; without "
                                 f"--against validate serves in-process (give --against URL, "
                                 f"or drop {flag})")


def cmd_validate(args) -> int:
    import scenarios

    from ..validation import validate

    check_flags(args)
    if args.against is not None:
        return cmd_validate_against(args)
    scenario = load_scenario(args)
    args.out_dir = out_dir = output_dir(args.out, scenario.name, "-validate")
    parallel = parallel_of(args)
    if args.jobs is None and not parallel.ray:  # real-time servings side by side disturb
        parallel = replace(parallel, workers=1)  # each other's timing: one at a time
    try:
        result = validate(scenario, out_dir, progress=not args.quiet, calibrate=args.calibrate,
                          profile=args.profile, parallel=parallel,
                          manifest=manifest("validate", scenario) | {
                              "profile": args.profile, "calibrate": args.calibrate})
    except (ValueError, FileNotFoundError) as exc:
        if isinstance(exc, scenarios.ScenarioError):
            raise
        raise RunFailed(f"{scenario.name}: {exc}") from None
    print(result.text())  # ends with the report's path
    return 0 if result.compared() else 1  # else the figures are over unlike requests


def cmd_validate_against(args) -> int:
    """`validate --against URL`: the simulation of the variant the server runs, against a bench
    of that server with the same requests."""
    from ..bench.outcome import any_succeeded, outcome_line
    from ..bench.urls import shown_url
    from ..validation.against import validate_against

    args.url = args.against
    options = bench_options(args, "--against")
    scenario = load_scenario(args)
    if args.variant is None and len(scenario.variants) > 1:
        raise UsageError(f"--against: the server runs one of the scenario's variants "
                         f"({', '.join(scenario.variant_names)}); name it with --variant")
    args.out_dir = out_dir = output_dir(args.out, scenario.name, "-validate")
    try:
        text, sent, apart = validate_against(scenario, options, out_dir,
                                             profile=args.profile,
                                             manifest=manifest("validate", scenario) | {
                                                 "profile": args.profile,
                                                 "against": shown_url(args.against)})
    except (ValueError, FileNotFoundError) as exc:
        import scenarios

        if isinstance(exc, scenarios.ScenarioError):
            raise
        raise RunFailed(f"{scenario.name}: {exc}") from None
    print(text)
    print(outcome_line(sent))
    return 0 if any_succeeded(sent) and not apart else 1  # else unlike requests counted
