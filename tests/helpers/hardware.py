"""A small scenario of the hardware cost model, written as TOML text and saved for a test."""

from __future__ import annotations

from pathlib import Path

import scenarios


def hardware_text(model: str = "meta-llama/Llama-3.1-8B", gpu: str = "h100-sxm",
                  hardware: str = "", extra: str = "", requests: int = 30, rate: float = 5.0,
                  prompts: tuple = (100, 500), outputs: tuple = (10, 50),
                  max_seq_len: int = 4096, name: str = "hw") -> str:
    """A scenario of `model` on `gpu` (`hardware`: more `[hardware]` lines), Poisson arrivals
    of uniform lengths; `extra`: tables after the workload (variants, a cluster, a sweep)."""
    return (f'name = "{name}"\n[model]\nname = "{model}"\nmax_seq_len = {max_seq_len}\n'
            f'[hardware]\ngpu = "{gpu}"\n{hardware}\n[cost]\nmodel = "hardware"\n'
            f'[workload]\nnum_requests = {requests}\n'
            f'arrival = {{ process = "poisson", rate = {rate} }}\n'
            f'prompt_tokens = {{ dist = "uniform", low = {prompts[0]}, high = {prompts[1]} }}\n'
            f'output_tokens = {{ dist = "uniform", low = {outputs[0]}, high = {outputs[1]} }}\n'
            f'{extra}\n')


def write_hardware(tmp_path, file: str = "hw.toml", **kwargs) -> str:
    """`hardware_text(**kwargs)` saved as `tmp_path / file`; its path."""
    path = Path(tmp_path) / file
    path.write_text(hardware_text(**kwargs))
    return str(path)


def kernel_scenario(tmp_path, gpu: str = "h100-sxm", extra: str = ""):
    """The loaded scenario of Llama-3.1-8B on `gpu` (`extra`: more `[hardware]` lines) under
    enough load, and prompts long enough, to reach the measured tables' edges."""
    return scenarios.load(write_hardware(tmp_path, "gpu.toml", gpu=gpu, hardware=extra,
                                         requests=40, rate=20.0, prompts=(100, 2000),
                                         outputs=(10, 300), max_seq_len=8192))
