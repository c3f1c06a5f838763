"""`CostModel`: what the simulator asks of a step-cost model.

One method is required, `step_time(shape)`: the seconds a step of that `StepShape` takes. A
shape's fields are numbers, or NumPy arrays of one length for a run of steps predicted at once
(`CostModelExecutor.execute_run`: decode-only steps whose counts change from step to step, the
other fields numbers); the result is then an array of that length, each element exactly (to
the last bit) what the step's own shape of numbers gives.

Everything else is optional, with a default here that means "nothing", so the simulator reads
every cost model the same way:

- `source`: what the model is, for messages ("the cost model");
- `model`: the model config it predicts (a dict; with `counts_gathered`, its `d_model` sizes
  the keys decode attention gathers) (None);
- `jitter`: the measured machine's speed process, applied with `cost.jitter` (None: not measured);
- `reference_s`: the median time of the reference step, for calibration (None: not recorded);
- `counts_gathered`: whether `step_time` reads `decode_gathered` (counting it costs O(batch) for
  some batches, so it stays 0 unless the model asks) (False);
- `wake_cost(idle_s)`: seconds added to the first step after `idle_s` seconds idle (0.0);
- `after_prefill_cost(tokens, k)` and `after_prefill_steps`: seconds added to the k-th step
  (1 <= k <= after_prefill_steps) after a step whose prefill chunks held `tokens` tokens
  (0.0 and 0: no such cost);
- `swap_block_s(block_size)`: seconds to copy one KV block between GPU and host memory (None:
  the simulator's default, a memcpy at `cost.swap_bandwidth_gbs`);
- `async_scheduling`: whether the server it models plans each step while the one before runs
  (vLLM's async scheduling, SGLang's and TensorRT-LLM's overlap schedulers): the simulation
  loop then gives a request that arrives while a step runs to the step after the next, already
  planned (`sim.loop`) (False: a request arriving during a step joins the next one).
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from .shape import StepShape


class CostModel(ABC):
    """A step-cost model: subclass it and define `step_time`; override the hooks a model has
    (module docstring). Subclasses may be frozen dataclasses: these defaults are plain class
    attributes, not fields."""

    source = "the cost model"
    model = None
    jitter = None
    reference_s = None
    counts_gathered = False
    after_prefill_steps = 0
    async_scheduling = False

    @abstractmethod
    def step_time(self, shape: StepShape):
        """Seconds a step of this shape takes: a float, or an array when the shape's fields
        are arrays (one element per step)."""

    def wake_cost(self, idle_s: float) -> float:
        """Seconds added to the first step after the engine was idle `idle_s` seconds."""
        return 0.0

    def after_prefill_cost(self, tokens: int, k: int) -> float:
        """Seconds added to the k-th step (1 <= k <= `after_prefill_steps`) after one whose
        prefill chunks held `tokens` tokens."""
        return 0.0

    def swap_block_s(self, block_size: int) -> float | None:
        """Seconds to copy one KV block of `block_size` tokens between GPU and host memory, or
        None for the simulator's default."""
        return None
