"""`servesim profile`: serve synthetic workloads on the real NumPy engine, fit the step-cost
model to its steps and write the profile (`sim.profiling`), measured with a known BLAS thread
count (`blas_threads`, set before NumPy loads).
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from ..profiling import threads
from .common import UsageError
from .flag_types import positive_integer


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("profile", help="profile the real engine and fit the "
                                                   "step-cost model")
    parser.add_argument("--model", nargs="+", metavar="KEY=VALUE",
                        help="model shape, e.g. d_model=256 n_layers=2 (default: the default "
                             "model)")
    parser.add_argument("--out", metavar="FILE", help="profile JSON (default: out/profile.json)")
    parser.add_argument("--quick", action="store_true",
                        help="a shorter, rougher profile (about half a minute): a sixth of "
                             "the served requests, or with --method grid a smaller grid "
                             "timed 3 times")
    parser.add_argument("--threads", type=positive_integer, metavar="N",
                        help=f"BLAS threads to measure with (default: {threads.DEFAULT_THREADS},"
                             f" or the count set in the environment)")
    parser.add_argument("--method", choices=("served", "grid"), default="served",
                        help="fit steps served in the real loop (default), or the isolated "
                             "grid of step shapes timed alone")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.set_defaults(func=cmd_profile, blas_threads=blas_threads)


# A held-out median step error above this says the profile's steps were timed unsteadily (a
# full profile on a quiet 2-core machine: about 2%)
NOISY_FIT = 0.10


def blas_threads(args) -> int:
    """What the profile is measured with: --threads, or the project's default (one)."""
    return args.threads or threads.DEFAULT_THREADS


def cmd_profile(args) -> int:
    model = model_config(args.model or ())
    check_profile_memory(model)
    from reports.output import check_writable_file

    from ..profiling.profiler import profile_engine
    from ..profiling.workloads import longest_request

    longest = longest_request() if args.method == "served" else longest_reference()
    if model.max_seq_len < longest:
        raise UsageError(f"--model max_seq_len: profiling ({args.method}) runs sequences of up "
                         f"to {longest:,} tokens, so the model's max_seq_len must be at least "
                         f"that, got {model.max_seq_len}")
    if args.threads is not None and threads.current() not in (None, str(args.threads)):
        raise UsageError(f"--threads {args.threads}: the environment sets "
                         f"{threads.set_by()}={threads.current()}, which BLAS reads instead; "
                         f"unset it, or give the same count")
    if args.out == "":
        raise UsageError("--out: give a file's path (an empty one names no file)")
    out = Path(args.out) if args.out else Path("out") / "profile.json"
    from ..costs.profile_file import is_profile_text
    from ..profiling import cache

    check_writable_file(out, is_profile_text)  # before minutes of profiling
    unstorable = cache.unwritable()
    if unstorable:
        print(f"note: the profile cache cannot be written ({unstorable}); the profile is "
              f"written to {out} alone", file=sys.stderr)
    profile = profile_engine(model, out, quick=args.quick, progress=not args.quiet,
                             method=args.method, store=not unstorable)
    held = profile["fit"]["held_out"]["median_abs_rel_error"]
    print(f"profiled in {profile['machine']['profiling_s']:.0f} s with "
          f"{profile['fingerprint']['blas_threads']} BLAS thread(s); held-out step error "
          f"median {100 * held:.1f}%")
    if held > NOISY_FIT:
        cause = "a --quick profile's few steps, " if args.quick else ""
        print(f"note: a held-out median error above {100 * NOISY_FIT:.0f}% says the steps were "
              f"not timed steadily ({cause}a busy machine, or a model too small to time well): "
              f"profile again{' without --quick' if args.quick else ''} on a quiet machine "
              f"before trusting this one", file=sys.stderr)
    kept = args.quick and cache.holds_full(profile["fingerprint_key"])
    if unstorable:
        where = ""
    elif kept:
        where = " (the full profile cached earlier is kept for `servesim validate --profile auto`)"
    else:
        where = " (and cached for `servesim validate --profile auto`)"
    path = str(out) if "/" in str(out) else f"./{out}"  # cost.profile reads a bare name as
    use = shlex.quote(f"cost.profile={path}")  # a shipped profile's; spaces paste whole
    print(f"profile written to {out}{where}; use it with --set {use}")
    return 0


def longest_reference() -> int:
    """The most tokens a sequence of the isolated grid's reference steps holds."""
    from ..profiling.grid import longest
    from ..profiling.reference import BLOCK_SIZE, REFERENCE
    from ..profiling.wake import reference_shapes

    return max(longest(shape) for shape in (REFERENCE, *reference_shapes(BLOCK_SIZE)))


def check_profile_memory(model) -> None:
    """The model's weights and the largest KV cache the profiler serves must fit in memory
    (`sim.memory`), before either is allocated."""
    from scenarios import DEFAULTS

    from ..memory import check_engine_memory
    from ..profiling.workloads import HELD_OUT, TRAIN

    engine = DEFAULTS["engine"]
    blocks = max(w.engine.get("num_kv_blocks", engine["num_kv_blocks"]) for w in TRAIN + HELD_OUT)
    try:
        check_engine_memory(model, blocks, engine["block_size"], "profiling")
    except ValueError as exc:
        raise UsageError(f"--model: {exc}") from None


def model_config(pairs):
    """A ModelConfig from the defaults and KEY=VALUE pairs (--model d_model=256 ...)."""
    from dataclasses import fields

    from engine.model import ModelConfig
    from scenarios.overrides import parse_value
    from scenarios.specs import did_you_mean

    allowed = [f.name for f in fields(ModelConfig)]
    values = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or key not in allowed:
            hint = did_you_mean(key, allowed).rstrip() if sep else ""
            raise UsageError(f"--model {pair}: expected KEY=VALUE with KEY one of "
                             f"{', '.join(allowed)}" + (f" ({hint})" if hint else ""))
        values[key] = parse_value(text)
    try:
        return ModelConfig(**values)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"--model: {exc}") from None
