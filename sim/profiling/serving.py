"""A resolved config served in real time by the NumPy engine, with every step's shape logged
(`StepLog`): how the profiler measures steps where they really run, and the served side of a
validation.

The server is started as a real one is before it takes requests: the KV cache is committed
(every page written once, so no step pays the kernel's first-touch page faults) and a few
throwaway steps run (BLAS start-up, scratch buffers), so the first request is not served by a
cold engine. The throwaway steps sample from their own generator: the run's sampling stream,
prompts and workload are exactly those of `sim.run_config` in serve mode.
"""

from __future__ import annotations

import numpy as np

from engine.block_manager import BlockManager
from engine.executor import NumpyExecutor
from engine.records import RunRecorder
from engine.server import serve

from ..build import build_server, sequence_factory
from ..costs.shape import shape_of
from ..workloads import build_workload, seeded_streams
from .grid import ShapeSpec, build_plan, release

WARMUP_ROUNDS = 3


class StepLog:
    """Executor protocol around a real executor: runs the plan, keeps its shape and the
    executor's time. Shapes are read before the step runs (postprocess changes them)."""

    def __init__(self, executor):
        self.executor = executor
        self.shapes: list = []
        self.executor_s: list[float] = []
        storage = executor.storage
        self._kv = (storage.shape[2], storage.shape[3] * storage.shape[4] * storage.k.itemsize)

    def execute(self, plan):
        shape = shape_of(plan, *self._kv)
        result = self.executor.execute(plan)
        self.shapes.append(shape)
        self.executor_s.append(result.duration_s)
        return result


def serve_logged(config, base_dir=None, before_serving=None,
                 params: dict | None = None, progress=None) -> tuple[RunRecorder, StepLog]:
    """Serve a resolved config (its mode is ignored) in real time; returns the recorder and the
    log of step shapes. `before_serving(executor)` runs once the server is warm, just before
    the first request (a calibration). `params`: the model's weights, when already built.
    `progress`: passed to `engine.server.serve` (a progress bar's callback)."""
    streams = seeded_streams(config.seed)
    workload = build_workload(config.workload, streams["workload"], base_dir)
    if workload.closed_loop is not None and workload.closed_loop.think_time_s:
        raise ValueError("workload.arrival.think_time_s: a closed loop with think time is not "
                         "served (serving sends each request at its arrival time or once a "
                         "slot is free)")
    scheduler, executor, model = build_server(config, "serve", streams, params=params)
    block_manager = scheduler.block_manager
    recorder = RunRecorder(block_manager.num_blocks)
    warm_up(executor, block_manager, model.vocab_size)
    make = sequence_factory(workload, streams["tokens"], model.vocab_size)
    arrival_s, cap = workload.served_arrivals()
    requests = [make(i, float(t)) for i, t in enumerate(arrival_s.tolist())]
    if before_serving is not None:
        before_serving(executor)
    log = StepLog(executor)
    serve(scheduler, log, requests, recorder, progress=progress, max_in_flight=cap,
          send_until_s=workload.send_until_s)
    return recorder, log


def warm_up(executor: NumpyExecutor, block_manager: BlockManager, vocab_size: int) -> None:
    """Commit the KV cache's memory and run a few throwaway steps (a prefill, a decode batch,
    both together) on scratch sequences; leaves the block manager as it found it and the
    executor's sampling generator untouched."""
    executor.storage.k[...] = 0.0  # write every page once: no first-touch faults while serving
    executor.storage.v[...] = 0.0
    rng, sampling_rng = np.random.default_rng(0), executor.rng
    bs = block_manager.block_size
    n = min(4, max(block_manager.num_free // 2, 1))  # decodes of one block each, as room allows
    shapes = [ShapeSpec(prefills=((0, bs),)), ShapeSpec(decodes=(bs,) * n),
              ShapeSpec(prefills=((0, bs),), decodes=(bs,) * max(n - 1, 1))]
    executor.rng = rng
    try:
        for _ in range(WARMUP_ROUNDS):
            for shape in shapes:
                if sum(-(-k // bs) for k in (*shape.decodes, *(c + m for c, m in shape.prefills))) \
                        > block_manager.num_free:
                    continue
                plan = build_plan(shape, block_manager, rng, vocab_size)
                try:
                    executor.execute(plan)
                finally:
                    release(plan, block_manager)
    finally:
        executor.rng = sampling_rng
