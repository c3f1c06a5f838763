"""Charts drawn in a second process while the first simulates and writes the tables.

For a long run, drawing the charts takes about as long as writing the CSV files, and importing
matplotlib takes a good part of a second more. `ChartWorker.start()` forks a process when a
command starts; it imports the chart code while the first process simulates, waits for the
finished runs, draws their charts and sends back the PNG bytes, while the first process writes
the tables. The images are the same bytes as drawn in-process, which is what happens where
fork is not available or the machine has one core (`start()` then returns None).

The worker exits when it has answered, when the first process closes its end without sending
anything (an error before the runs were done), or when the first process is gone; an
interrupted command kills it (`kill`) rather than wait for it.
"""

from __future__ import annotations

import os
import pickle
import signal
import traceback


STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


class ChartsFailed(RuntimeError):
    """The chart process could not draw the charts (it ran out of memory, was killed, or its
    code failed); the message is one line, the worker's traceback is kept in `details`."""

    def __init__(self, message: str, details: str = ""):
        super().__init__(message)
        self.details = details


class ChartWorker:
    """A forked process that draws one report's charts (`charts.make_charts`)."""

    def __init__(self, pid: int, jobs, answers):
        self._pid, self._jobs, self._answers = pid, jobs, answers

    @classmethod
    def start(cls) -> "ChartWorker | None":
        """Fork the worker, or None where it would not run beside this process."""
        if not hasattr(os, "fork") or len(os.sched_getaffinity(0)) < 2:
            return None
        job_r, job_w = os.pipe()
        answer_r, answer_w = os.pipe()
        # A stop signal handled inside fork's own handlers (run in Python) would be lost
        # ("Exception ignored"): it waits until the fork is done.
        held = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            pid = os.fork()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
        if pid == 0:  # the worker
            os.close(job_w)
            os.close(answer_r)
            _serve(job_r, answer_w)  # never returns
        os.close(job_r)
        os.close(answer_w)
        return cls(pid, os.fdopen(job_w, "wb"), os.fdopen(answer_r, "rb"))

    def draw(self, results, summaries) -> None:
        """Send the runs to draw; `charts()` collects the images."""
        with self._jobs:
            pickle.dump((results, summaries), self._jobs, protocol=pickle.HIGHEST_PROTOCOL)

    def charts(self) -> list:
        """The images of the runs sent with `draw` (waits for them)."""
        with self._answers:
            try:
                ok, value = pickle.load(self._answers)
            except EOFError:
                ok, value = False, "the chart process ended without an answer (killed, or out " \
                                   "of memory)"
        self._reap()
        if not ok:
            last = value.strip().splitlines()[-1] if value.strip() else "no reason given"
            raise ChartsFailed(f"drawing the charts failed: {last}", value)
        return value

    def close(self) -> None:
        """Let the worker go without a job (an error came first)."""
        for end in (self._jobs, self._answers):
            if not end.closed:
                end.close()
        self._reap()

    def kill(self) -> None:
        """Stop the worker at once, wherever it is (the command was interrupted: no waiting
        for its imports or its drawing)."""
        if self._pid is not None:
            try:
                os.kill(self._pid, signal.SIGKILL)
            except ProcessLookupError:  # it has already exited; `close` reaps it
                pass
        self.close()

    def _reap(self) -> None:
        if self._pid is not None:
            os.waitpid(self._pid, 0)
            self._pid = None


def _serve(job_fd: int, answer_fd: int) -> None:
    """The worker's whole life: import, wait for a job, answer, exit."""
    status = 0
    try:
        from .charts import make_charts  # the slow imports, while the first process works

        with os.fdopen(job_fd, "rb") as jobs:
            try:
                results, summaries = pickle.load(jobs)
            except EOFError:
                os._exit(0)  # closed without a job
        try:
            answer = (True, make_charts(results, summaries))
        except Exception:  # sent back whole and raised in the first process
            answer, status = (False, traceback.format_exc()), 1
        with os.fdopen(answer_fd, "wb") as answers:
            pickle.dump(answer, answers, protocol=pickle.HIGHEST_PROTOCOL)
    except BaseException:  # interrupted, or the first process has gone: nobody to tell
        status = 1
    finally:
        os._exit(status)  # never back into the first process's code
