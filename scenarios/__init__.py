"""Scenarios: what to run, as TOML files validated on load.

    scenario = scenarios.load("kv-pressure")          # a built-in name, or a path
    for run in scenario.runs():                       # every variant at every sweep point
        run.variant, run.sweep, run.config            # config: a typed RunConfig

`list_builtin()` names the scenarios shipped beside this file. Every mistake in a file, a
variant, a sweep or a `--set` override is a one-line `ScenarioError` raised before anything
runs. The format is documented in docs/scenarios/format.md.
"""

from .config import RunConfig
from .defaults import DEFAULTS
from .errors import ScenarioError
from .files import builtin_names, find, list_builtin
from .scenario import DEFAULT_SCENARIO, RunSpec, Scenario, Variant, load

__all__ = ["DEFAULTS", "DEFAULT_SCENARIO", "RunConfig", "RunSpec", "Scenario", "ScenarioError", "Variant",
           "builtin_names", "find", "list_builtin", "load"]
