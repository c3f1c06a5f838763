"""The `servesim` command line: `main` reads the arguments, sets the BLAS thread count, runs one
command and turns every failure a user can cause into one line and an exit status.

    servesim run [SCENARIO] [--out DIR] [--set KEY=VALUE ...] [--quiet] [--jobs N] [--ray]
    servesim search SCENARIO [--out DIR] [--set KEY=VALUE ...] [--jobs N] [--ray]
    servesim scenarios
    servesim profile [--model KEY=VALUE ...] [--out FILE] [--quick] [--threads N]
    servesim validate SCENARIO [--out DIR] [--profile auto|NAME|PATH] [--calibrate] [--jobs N]
                      [--against URL]
    servesim bench URL [SCENARIO] [--out DIR] [--endpoint PATH] [--max-concurrency N] ...
    servesim serve [SCENARIO] [--host H] [--port P] [--set KEY=VALUE ...] [--variant NAME]
                   [--max-waiting N]

Each command is one module (`run.py`, `search.py`, `listing.py`, `profile.py`, `validate.py`,
`bench.py`, `serve.py`) whose `add_parser` adds its subparser and sets its `cmd_*` function,
which takes the parsed arguments and returns the exit status. What they share is in
`common.py` (errors, scenario loading, output folders, parallel backends), `flags.py` (the
flags of `vllm bench serve`; `vllm_flags.py` those it does not take) and `client_flags.py`
(the HTTP client's); they never import each other. A mistake in a scenario, an override or
a model setting is one line on stderr and exit status 2, with no traceback; nothing runs.

Nothing that loads NumPy is imported before the arguments are read: a command that runs NumPy
names its BLAS thread count (`blas_threads`), which BLAS reads once, when NumPy loads
(`sim/profiling/threads.py`); the command modules import everything heavy inside their
functions.
"""

from __future__ import annotations

import argparse
import codecs
import os
import signal
import sys
from pathlib import Path

from ..profiling import threads
from .common import STOP_SIGNALS, USAGE_ERROR, RunFailed, Terminated, UsageError, version
from .flag_values import split_set_values
from .vllm_flags import vllm_flag_hint


class Parser(argparse.ArgumentParser):
    """argparse with its errors as the project's one line (and status 2)."""

    def error(self, message: str):
        message = vllm_flag_hint(message) or message
        self.exit(USAGE_ERROR, f"servesim: error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    from . import bench, listing, profile, run, search, serve, validate  # under main's Ctrl-C

    parser = Parser(
        prog="servesim", description="Simulate an LLM inference server whose step costs come "
                                     "from a real NumPy inference engine.")
    parser.add_argument("--version", action="version", version=f"servesim {version()}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                       parser_class=Parser)
    for command in (run, search, listing, profile, validate, bench, serve):  # --help's order
        command.add_parser(subparsers)
    return parser


def set_threads(args) -> None:
    """Before NumPy loads: the BLAS thread count the command runs NumPy with (its
    `blas_threads(args)`: `profile` measures with --threads, default 1; `validate` serves with
    its profile's count; `serve` with one). A count already set in the environment stays.
    Where NumPy is already loaded (a Python caller), nothing can change."""
    blas_threads = getattr(args, "blas_threads", None)
    if "numpy" in sys.modules or blas_threads is None:
        return
    threads.apply(blas_threads(args))


def main(argv=None) -> int:
    """Run one command; its exit status. Every failure a user can cause, an interruption at any
    point included, is one line on stderr and a non-zero status, never a traceback."""
    # a signal ignored when servesim starts (`nohup` ignores SIGHUP) stays ignored
    previous = {sig: signal.signal(sig, _terminate) for sig in STOP_SIGNALS
                if signal.getsignal(sig) is not signal.SIG_IGN}
    streams = {stream: stream.errors for stream in (sys.stdout, sys.stderr)
               if getattr(stream, "errors", None) in ("strict", "surrogateescape")
               and hasattr(stream, "reconfigure")}
    for stream in streams:
        stream.reconfigure(errors=ESCAPE)
    args = None
    try:
        argv = split_set_values(list(sys.argv[1:] if argv is None else argv))
        args = build_parser().parse_args(argv)
        set_threads(args)
        return _run_command(args)
    except KeyboardInterrupt:
        return _fail(f"interrupted{_kept(args)}", 130, prefix="servesim: ")
    except Terminated:
        return _fail(f"terminated{_kept(args)}", 143, prefix="servesim: ")
    except UsageError as exc:
        return _fail(str(exc), USAGE_ERROR)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for stream, errors in streams.items():
            stream.reconfigure(errors=errors)


def _escaped(error: UnicodeError):
    """What a terminal's encoding cannot hold: a path's undecodable bytes as they were (as
    Python's surrogateescape writes them), any other character as a backslash escape (a
    variant named "débit" under an ASCII locale), never an error."""
    try:
        return codecs.lookup_error("surrogateescape")(error)
    except UnicodeError:
        return codecs.lookup_error("backslashreplace")(error)


ESCAPE = "servesim-escape"  # stdout's and stderr's error handler while a command runs
codecs.register_error(ESCAPE, _escaped)


RECORDING = ("run", "validate", "bench")  # the commands that write vLLM's result files


def _run_command(args) -> int:
    """The command's status, with the errors it can meet turned into one line."""
    from reports.chart_worker import ChartsFailed
    from reports.places import OutputError
    from scenarios import ScenarioError

    from reports.vllm_json import record_date

    if args.command in RECORDING:  # a bad SOURCE_DATE_EPOCH is found before any work
        try:
            record_date()
        except ValueError as exc:
            return _fail(str(exc), USAGE_ERROR)
    try:
        return args.func(args)
    except (ScenarioError, UsageError, OutputError) as exc:
        return _fail(str(exc), USAGE_ERROR)
    except (RunFailed, ChartsFailed) as exc:
        return _fail(f"{exc}{_kept(args) if isinstance(exc, ChartsFailed) else ''}", 1)
    except BrokenPipeError:  # whoever read the output stopped (`| head`): what is written stays
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit
        return 141  # 128 + SIGPIPE, as a shell tool killed by the closed pipe
    except OSError as exc:  # a file system fault: unwritable, full, a file where a folder goes
        where = exc.filename or getattr(args, "out_dir", None)
        problem = f"{exc.strerror or exc}{_kept(args)}"
        return _fail(f"{where}: {problem}" if where else problem, 1)
    except MemoryError:
        return _fail(f"out of memory{_kept(args)}; make the run smaller (fewer requests, "
                     f"variants or sweep points)", 1)


def _fail(message: str, status: int, prefix: str = "servesim: error: ") -> int:
    print(f"{prefix}{message}", file=sys.stderr)
    return status


def _kept(args) -> str:
    """What an interrupted or failed command left: nothing new, and any earlier output whole;
    or, stopped once its output was in place, that output."""
    try:  # an interruption may have come while a module loaded: one line all the same
        from reports.output import was_written
    except Exception:
        return "; nothing written"
    out_dir = getattr(args, "out_dir", None)
    if out_dir is not None and was_written(out_dir):
        return f"; the output in {out_dir}/ was written whole first"
    try:
        earlier = out_dir is not None and Path(out_dir).is_dir() and \
            any(Path(out_dir).iterdir())
    except OSError:  # a path the file system cannot even look up
        earlier = False
    if earlier:
        return f"; nothing written, the earlier output in {out_dir}/ is kept whole"
    return "; nothing written"


def _terminate(signum, frame):
    raise Terminated()
