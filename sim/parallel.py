"""Run independent simulation jobs serially, on a local process pool, or on Ray.

A job is a picklable value and a module-level function of it (a run's config -> its
RunRecorder, `run_config_job`; a search point -> its bisection, `sim.search`).
`run_jobs(function, jobs, parallel)` returns the results in the jobs' order whatever order they
finish in, so a parallel run writes the serial run's files byte for byte: every simulation
draws only from its own seeded streams.

- serial (`Parallel(workers=1)`, or a single job): in this process, one after the other;
- a process pool (the default): `concurrent.futures.ProcessPoolExecutor` with `workers`
  processes (default min(usable CPUs, number of jobs)), forked from a clean server process
  ("forkserver"), never from this one, which may hold threads (Ray's, a progress bar's);
- Ray (`Parallel(ray=True)`): the cluster at `ray_address` (else at RAY_ADDRESS) when one is
  given, else a local Ray started for the call with `workers` CPUs and shut down after; one task
  of one CPU per job. Where this process already joined a Ray, that one is used and left
  running. Ray is optional: `pip install "servesim[ray]"`.

Workers run BLAS on one thread, the project's default (`profiling.threads`): a pool worker
sets it before NumPy loads; Ray sets OMP_NUM_THREADS=1 in its workers, which OpenBLAS reads.
A job's exception is raised here as itself (a Ray task's cause, unwrapped); a pool worker or
Ray worker killed under its job, or a Ray address where nothing answers, is `WorkerLost`. A
failure or an interruption ends the pool's other jobs
at once. A job's notes (`sim.notes`: a fallback to the roofline, say) are printed here as it
finishes, each once, not by every worker that meets them.
"""

from __future__ import annotations

import importlib.util
import logging
import multiprocessing
import os
import signal
import socket
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from multiprocessing import forkserver, resource_tracker
from typing import Callable

from . import notes
from .profiling import threads

RAY_MISSING = 'Ray is not installed: pip install "servesim[ray]"'


@dataclass(frozen=True)
class Parallel:
    """How to run jobs: on `workers` processes (1: serially; None: min(usable CPUs, jobs))
    of a pool, or on Ray with `ray` (at `ray_address`, else RAY_ADDRESS, else a local Ray
    of `workers` CPUs). The command line's --jobs, --ray and --ray-address."""

    workers: int | None = None
    ray: bool = False
    ray_address: str | None = None

    def __post_init__(self):
        if self.workers is not None and self.workers < 1:
            raise ValueError(f"--jobs must be a positive integer, got {self.workers}")
        if self.ray and self.cluster_address() and self.workers is not None:
            raise ValueError("--jobs sets the CPUs of a local Ray; a running Ray cluster "
                             "schedules on its own CPUs")
        if self.ray and importlib.util.find_spec("ray") is None:
            raise ValueError(RAY_MISSING)

    def cluster_address(self) -> str | None:
        """The running Ray cluster to join, if any."""
        return self.ray_address or os.environ.get("RAY_ADDRESS") or None

    def worker_count(self, num_jobs: int) -> int:
        """Processes (or a local Ray's CPUs) for `num_jobs` jobs."""
        return self.workers or max(1, min(len(os.sched_getaffinity(0)), num_jobs))

    def describe(self, num_jobs: int) -> str:
        """Where the jobs run, in a few words ("2 processes", "Ray at ADDR")."""
        if self.ray:
            address = self.cluster_address()
            return f"Ray at {address}" if address else \
                f"a local Ray of {self.worker_count(num_jobs)} CPUs"
        workers = self.worker_count(num_jobs)
        return "this process" if workers == 1 else f"{workers} processes"


def run_jobs(function: Callable, jobs: list, parallel: Parallel = Parallel(),
             done: Callable[[int, object], None] | None = None) -> list:
    """[function(job) for job in jobs], run as `parallel` says; `done(index, result)` is
    called as each job finishes (in the order they finish: a progress display)."""
    if not jobs:
        return []
    if parallel.ray:
        return _on_ray(function, jobs, parallel, done)
    workers = parallel.worker_count(len(jobs))
    if workers == 1:
        results = []
        for index, job in enumerate(jobs):
            results.append(function(job))
            if done is not None:
                done(index, results[-1])
        return results
    return _on_pool(function, jobs, workers, done)


def run_config_job(job: tuple):
    """A run's RunRecorder: `job` is (resolved config, base_dir), as `sim.run_config` takes."""
    from .runner import run_config

    config, base_dir = job
    return run_config(config, base_dir=base_dir)


def _on_pool(function, jobs: list, workers: int, done) -> list:
    context = multiprocessing.get_context("forkserver")
    _start_helpers()
    hangup_ignored = signal.getsignal(signal.SIGHUP) is signal.SIG_IGN  # nohup: so are they
    pool = ProcessPoolExecutor(workers, mp_context=context, initializer=_start_worker,
                               initargs=(hangup_ignored,))
    try:
        futures = {pool.submit(_noted, function, job): i for i, job in enumerate(jobs)}
        results = [None] * len(jobs)
        for future in as_completed(futures):
            index = futures[future]
            results[index] = _released(future.result())  # the first failure stops the rest
            if done is not None:
                done(index, results[index])
        return results
    except BrokenProcessPool:  # a worker killed (the out-of-memory killer, a signal)
        raise WorkerLost("a worker process ended before its run did (killed: out of memory, "
                         "or a signal); run again, with fewer --jobs") from None
    except BaseException:  # a failure, Ctrl-C, a stop signal: the jobs running are not wanted
        for process in list((getattr(pool, "_processes", None) or {}).values()):
            process.terminate()  # the workers ignore Ctrl-C, so the pool would wait for them
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _noted(function: Callable, job):
    """In a worker: (function(job), the notes it said), none printed there."""
    with notes.held() as said:
        result = function(job)
    return result, said


def _released(outcome: tuple):
    """A job's result, its notes printed (those this process has not printed)."""
    result, said = outcome
    notes.release(said)
    return result


def _start_helpers() -> None:
    """Start multiprocessing's fork server and resource tracker (once a process) deaf to
    SIGHUP, which a closed terminal sends the whole process group: killed by it, the tracker
    is restarted by this process as it stops and prints tracebacks for every queue it never
    saw. This process keeps its own handler (a hang-up in these milliseconds is missed)."""
    main = threading.current_thread() is threading.main_thread()  # only it may set signals
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN) if main else None
    try:
        resource_tracker.ensure_running()
        forkserver.ensure_running()
    finally:
        if main:
            signal.signal(signal.SIGHUP, signal.SIG_DFL if previous is None else previous)


class WorkerLost(ValueError):
    """A pool or Ray worker ended before its job did, or no Ray cluster answers where one was
    named: one line, as a run that failed on its data."""


def _start_worker(hangup_ignored: bool = False) -> None:
    """A pool worker: BLAS on one thread (before NumPy loads); Ctrl-C is the caller's to
    handle (it stops the pool), not a traceback from every worker; a hang-up ends it (the fork
    server it comes from ignores them), unless the caller ignores hang-ups (nohup)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN if hangup_ignored else signal.SIG_DFL)
    if "numpy" not in sys.modules:
        threads.apply(threads.DEFAULT_THREADS)


def _on_ray(function, jobs: list, parallel: Parallel, done) -> list:
    import ray

    started = not ray.is_initialized()
    if started:
        address = parallel.cluster_address()
        if address:
            _check_answers(address)
            ray.init(address=address, logging_level=logging.ERROR)
        else:
            ray.init(num_cpus=parallel.worker_count(len(jobs)), include_dashboard=False,
                     logging_level=logging.ERROR)
    try:
        task = ray.remote(num_cpus=1, max_retries=0)(_noted)
        refs = {task.remote(function, job): i for i, job in enumerate(jobs)}
        results = [None] * len(jobs)
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            index = refs[ready[0]]
            results[index] = _released(_task_result(ray, ready[0]))
            if done is not None:
                done(index, results[index])
        return results
    finally:
        if started:
            ray.shutdown()


# How long a Ray cluster's address may take to answer (ray.init waits for it without end)
CONNECT_TIMEOUT_S = 10.0
# An HTTP/2 client's first bytes, its preface and an empty SETTINGS frame: Ray's GCS and its
# client server speak gRPC, over HTTP/2, and so answer with a SETTINGS frame of their own
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
SETTINGS_FRAME = 4


def _check_answers(address: str) -> None:
    """WorkerLost where nothing at a Ray cluster's HOST:PORT (ray:// too) accepts a connection
    within `CONNECT_TIMEOUT_S` (each address the host resolves to), or what accepts does not
    answer as Ray's GCS does within as long again (an HTTP/2 SETTINGS frame, gRPC's first
    answer; with TLS on, as RAY_USE_TLS says, the connection alone): ray.init waits without end
    for an address where nothing listens, or where something else does (a web server, the
    dashboard's port). "auto" and other forms are Ray's to find."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return
    here = "or leave --ray-address and RAY_ADDRESS out to start one here"
    try:
        with socket.create_connection((host.strip("[]"), int(port)),
                                      CONNECT_TIMEOUT_S) as connection:
            if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
                return  # a TLS handshake first (as Ray reads the variable): left to Ray
            deadline = time.monotonic() + CONNECT_TIMEOUT_S
            connection.sendall(HTTP2_PREFACE)
            answer, closed = _first_bytes(connection, 9, deadline)
    except OSError as exc:
        raise WorkerLost(f"no Ray cluster answers at {address} ({exc.strerror or exc}); start "
                         f"one there (ray start --head), {here}") from None
    if len(answer) < 9 or answer[3] != SETTINGS_FRAME:
        said = (f"it answered {answer!r}" if answer else "it closed the connection"
                if closed else f"nothing came back in {CONNECT_TIMEOUT_S:g} s")
        raise WorkerLost(f"what listens at {address} is not a Ray cluster ({said}, where Ray "
                         f"answers in gRPC at once); give the address `ray start --head` "
                         f"printed (port 6379 unless set), {here}")


def _first_bytes(connection, count: int, deadline: float) -> tuple[bytes, bool]:
    """(up to `count` bytes a connection sends before the `deadline` on the monotonic clock,
    whether it closed first)."""
    data = b""
    while len(data) < count:
        left = deadline - time.monotonic()
        if left <= 0:
            return data, False
        connection.settimeout(left)
        try:
            chunk = connection.recv(count - len(data))
        except TimeoutError:
            return data, False
        if not chunk:
            return data, True
        data += chunk
    return data, False


def _task_result(ray, ref):
    """A finished task's result; a failed task raises its own exception (a ValueError stays
    a ValueError, its message unchanged); a task whose worker or node died, `WorkerLost`."""
    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as exc:
        if isinstance(exc.cause, Exception):
            raise exc.cause from None
        raise
    except ray.exceptions.RayError as exc:  # its worker died (killed, out of memory), ...
        raise WorkerLost(f"a Ray worker ended before its run did ({type(exc).__name__}: "
                         f"killed, out of memory, or its node lost); run again, on fewer or "
                         f"larger workers") from None
