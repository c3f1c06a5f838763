"""Notes: what a run tells its user on stderr (`note: ...`), each once, never per step.

A note is something the user should know but that does not stop the run: a GPU without
measured kernel tables costed by the roofline, steps past the tables' reach. `say_once(note)`
prints it the first time this process meets it. Two holders change that:

- `collected()` gathers the notes said while it is open, each once, without changing what is
  printed: a run's own notes, which its report lists (`sim.runner.run_config`);
- `held()` gathers them and prints nothing: a check that may still fail (its notes are
  printed, with `release`, only once every check passed, so a refused scenario gets its one
  line of error alone), or a job in a worker process (`sim.parallel`: the parent releases each
  job's notes, so a note said by every worker is printed once).
"""

from __future__ import annotations

import sys
from contextlib import contextmanager

_said: set = set()  # printed by this process
_open: list = []  # [(notes gathered, whether printing is held)], innermost last


def say_once(note: str) -> None:
    """Tell the user `note` (see the module docstring)."""
    for notes, _ in _open:
        if note not in notes:
            notes.append(note)
    if not any(hold for _, hold in _open):
        release([note])


def release(notes) -> None:
    """Print the notes this process has not printed yet, in order; nothing while a hold is
    open (they are the holder's already: `say_once` gave them to every open holder)."""
    if any(hold for _, hold in _open):
        return
    for note in notes:
        if note not in _said:
            _said.add(note)
            print(note, file=sys.stderr)


@contextmanager
def collected():
    """The notes said inside, each once, in order (printed as usual)."""
    with _gathering(hold=False) as notes:
        yield notes


@contextmanager
def held():
    """The notes said inside, each once, in order, none printed (the caller may `release`
    them)."""
    with _gathering(hold=True) as notes:
        yield notes


@contextmanager
def _gathering(hold: bool):
    frame = ([], hold)
    _open.append(frame)
    try:
        yield frame[0]
    finally:
        del _open[next(i for i, f in enumerate(_open) if f is frame)]


def forget() -> None:
    """Forget what was printed (a test that counts notes starts afresh)."""
    _said.clear()
