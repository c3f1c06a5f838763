"""A small scenario of a model on a GPU under the hardware cost model, saved for a test, its
hardware setup, and the one-line error it gets where it cannot run."""

from __future__ import annotations

import pytest

import scenarios
from scenarios import ScenarioError
from sim.checks import check_scenario
from sim.costs.hardware import hardware_setup


def scenario(tmp_path, model='name = "meta-llama/Llama-3.1-8B"', gpu="h100-sxm", tp=1,
             hardware="", max_seq_len=4096, requests=4):
    path = tmp_path / "s.toml"
    path.write_text(f'[model]\n{model}\nmax_seq_len = {max_seq_len}\n[hardware]\ngpu = "{gpu}"\n'
                    f'tp = {tp}\n{hardware}\n[cost]\nmodel = "hardware"\n[engine]\n'
                    f'max_num_seqs = 64\nmax_num_batched_tokens = 4096\n[workload]\n'
                    f'num_requests = {requests}\narrival = {{ process = "poisson", rate = 4.0 }}\n'
                    f'prompt_tokens = {{ dist = "uniform", low = 100, high = 1500 }}\n'
                    f'output_tokens = {{ dist = "uniform", low = 10, high = 100 }}\n')
    return path


def setup_of(tmp_path, **kwargs):
    return hardware_setup(scenarios.load(scenario(tmp_path, **kwargs)).base)


def refusal(tmp_path, **kwargs) -> str:
    """The one-line error loading and checking the scenario gives."""
    path = scenario(tmp_path, **kwargs)
    with pytest.raises(ScenarioError) as info:
        check_scenario(scenarios.load(path))
    text = str(info.value)
    assert "\n" not in text and text.startswith(f"{path}: ")
    return text
