"""The bisection of one search point: the highest arrival rate whose probe meets the target.

Pure: `bisect_rate` takes a `probe(rate)` function (a simulation, or any function in a test)
whose result says whether it `meets` the target, and decides which rates to probe; it never
runs anything itself. The tolerance is relative, so the midpoint is geometric: each probe takes
the square root of the bracket's ratio high / low (halves its logarithm), and the number of
probes depends on that ratio, not on the rates' scale.
"""

from __future__ import annotations

import math
from typing import Callable


def bisect_rate(probe: Callable, low: float, high: float, tolerance: float) -> list:
    """Every probe taken, in order: `low` first (if it fails, nothing lower is tried), then
    `high` (if it meets, nothing higher is tried), then the geometric midpoint of the highest
    rate that met and the lowest that failed, until (failed - met) / failed < tolerance, or
    until no float lies between them (a tolerance below the floats' own spacing).
    Meeting the target is assumed to fall with the rate; where noise breaks that, the answer
    is still a rate observed to meet it, just below one observed to fail."""
    assert 0 < low < high and 0 < tolerance < 1
    probes = [probe(low)]
    if not probes[0].meets:
        return probes
    probes.append(probe(high))
    if probes[1].meets:
        return probes
    met, failed = low, high
    while (failed - met) / failed >= tolerance:
        rate = math.sqrt(met * failed)
        if not met < rate < failed:  # the bracket cannot be split any further
            break
        probes.append(probe(rate))
        if probes[-1].meets:
            met = rate
        else:
            failed = rate
    return probes
