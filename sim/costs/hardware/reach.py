"""What a step past the measured tables' reach costs, and the note that says so.

The tables answer NaN more than 2x past their measured range (`interpolation.MAX_REACH`);
there an operator takes the roofline's growth from the tables' time where they end, not the
roofline's level, which may be several times off theirs (`merge`), so that a step of one row
more costs about the same, not a fifth. `PastReach` says, once a command, which operators a
costed step passed the reach of (docs/sim/hardware.md, "Measured kernels").
"""

from __future__ import annotations

import math

import numpy as np

from ...notes import say_once


def merge(roofline, measured, op: str, beyond: dict, tokens):
    """The measured times where they are numbers; where they are NaN (out of the tables'
    reach: noted in `beyond` with the fewest `tokens` rows out of it; a row count of 0, a
    table's first entry, is never a step), the roofline's, scaled to meet the measured time at
    the nearest row count reached (`_anchored`); the roofline's where they are absent."""
    if measured is None:
        return roofline
    missing = np.isnan(measured)
    if not missing.any():
        return measured
    rows = np.broadcast_to(tokens, missing.shape)
    out = missing & (rows >= 1)
    if out.any():
        beyond[op] = int(rows[out].min())
    return np.where(missing, _anchored(roofline, measured, rows, missing), measured)


def _anchored(roofline, measured, rows, missing):
    """The roofline's times scaled, past the tables' reach above (below), by the measured /
    roofline ratio at the most (fewest) rows reached, so that a step's time does not jump
    where the tables end (the roofline may be several times off them there: its growth is
    kept, not its level). The ratio is taken at the most (fewest) rows the array holds that
    the tables reach: a run's tables hold every row count from 0, so that is where they end,
    and `layer_op_times` adds those row counts (`reach`); an array with no row reached keeps
    the roofline's level."""
    roofline = np.broadcast_to(roofline, missing.shape)
    reached = rows[~missing]
    if reached.size == 0:
        return roofline
    out = np.array(roofline, dtype=np.float64)
    for edge, side in ((reached.max(), missing & (rows > reached.max())),
                       (reached.min(), missing & (rows < reached.min()))):
        at = np.flatnonzero((rows == edge) & ~missing)[0]
        if side.any() and roofline.flat[at] > 0:
            out[side] *= measured.flat[at] / roofline.flat[at]
    return out


class PastReach:
    """The operators whose measured tables a tabulated step size is past the reach of (2x their
    range), said once each when the first step that reaches them is costed, not when a table
    is grown past them (a table grows to twice the largest step asked for). `rows`: what the
    step's rows are, for the note ("" or " (every rank's)")."""

    def __init__(self, source: str, rows: str = ""):
        self.source, self.rows = source, rows
        self.pending: dict[str, int] = {}  # operator -> the fewest rows past its reach
        self.said: set[str] = set()
        self.first = math.inf  # the fewest rows that reach a pending operator

    def tabulated(self, beyond: dict) -> None:
        """A table grew: `beyond` holds its operators' fewest rows past reach."""
        self.pending.update((op, at) for op, at in beyond.items() if op not in self.said)
        self.first = min(self.pending.values(), default=math.inf)

    def reached(self, rows: int, sampled: int = 0) -> None:
        """A step of `rows` rows, `sampled` of them sampled (the LM head's), is costed."""
        if max(rows, sampled) < self.first:
            return
        ops = {op: at for op, at in self.pending.items()
               if (sampled if op == "lm_head" else rows) >= at}
        if not ops:
            return
        for op in ops:
            del self.pending[op]
        self.said.update(ops)
        self.first = min(self.pending.values(), default=math.inf)
        layers = {op: at for op, at in ops.items() if op != "lm_head"}
        parts = [f"steps of {min(layers.values()):,} rows or more{self.rows} are past the "
                 f"measured tables' reach (2x their range) for {', '.join(sorted(layers))}"] \
            if layers else []
        if "lm_head" in ops:
            parts.append(f"steps sampling {ops['lm_head']:,} rows or more are past the LM "
                         f"head's")
        say_once(f"note: {self.source}: {'; '.join(parts)}; costed there by the roofline, "
                 f"scaled to meet the tables where they end")


def growth(roofline: float, at_edge: float) -> float:
    """How much the roofline grows from a point the tables reach to a step past them:
    attention past the reach takes the tables' time there times this, not the roofline's own,
    which may be several times off theirs (docs/sim/hardware.md, "Measured kernels")."""
    return roofline / at_edge if at_edge > 0 else 1.0
