"""Step-cost models: how long an engine step takes, predicted from the shape of its `StepPlan`
(`shape.StepShape`), and the executor that runs a simulation on them.

- `CostModel` (`model.py`): what every cost model provides, `step_time(shape)`, and the optional
  hooks (wake-up, after-prefill and swap costs, jitter, reference step) with their defaults;
- `LinearCost` (`linear.py`): explicit coefficients, for what-if studies and analytic checks;
- `FittedCost` (`fitted.py`): measured on the real engine by `sim.profiling` and read from a
  profile file (`profile_file.py`);
- `CostModelExecutor` (`executor.py`): the simulator's executor, O(prefill chunks) per step;
- `jitter.py`: the machine's speed from moment to moment; `fitting.py`: non-negative least
  squares on relative error; `calibrate.py`: a cost model scaled to the machine's speed now.

`cost_model(cost, model, block_size)` builds the one a resolved `cost` table selects.
"""

from __future__ import annotations

from ..notes import say_once
from .executor import CostModelExecutor
from .fitted import FEATURES, FittedCost
from .linear import LINEAR_FIELDS, LinearCost
from .model import CostModel
from .profile_file import check_profile_model, load_profile, profile_path
from .shape import COUNTS, StepShape, shape_of

__all__ = ["COUNTS", "FEATURES", "CostModel", "CostModelExecutor", "FittedCost",
           "LINEAR_FIELDS", "LinearCost", "StepShape", "check_profile_model", "cost_model",
           "load_profile", "profile_path", "shape_of"]


def cost_model(settings, model, block_size: int | None = None) -> CostModel:
    """The cost model a resolved config's cost settings select ("profile" or "linear"), for
    the NumPy engine's `model` (and, if given, its KV `block_size`)."""
    kind = settings.model
    if kind == "linear":
        return LinearCost(**{name: getattr(settings, name) for name in LINEAR_FIELDS})
    if kind == "profile":
        fitted = load_profile(settings.profile)
        check_profile_model(fitted, model)
        if block_size is not None and block_size != fitted.block_size:
            say_once(f"note: cost.profile: {fitted.source} was measured with KV blocks of "
                     f"{fitted.block_size} tokens and the run's are {block_size} "
                     f"(engine.block_size): its steps are costed as measured; profile with "
                     f"this block size for its own costs")
        return fitted
    raise ValueError(f"cost.model must be one of profile, linear, live (live runs the real "
                     f"engine: mode cosimulate), got {kind!r}")
