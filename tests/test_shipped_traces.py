"""The traces servesim ships: byte for byte the published files, loaded as their rows say,
installed with the package, and enough on their own to run the built-in trace scenarios from a
copy of the code with nothing beside it."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import scenarios
from scenarios.defaults import SHIPPED_TRACES
from sim.workloads.traces import load_trace, shipped_trace

ROOT = Path(__file__).resolve().parents[1]
DATA = shipped_trace("azure-conv").parent

# SHA-256 of each published file, as the sources distribute it (see the data folder's README.md).
PUBLISHED_SHA256 = {
    "azure-conv": "2f1e5b666d4e3055fdbba98598ce2ec307767b9064e03e2fa46676dbcc7d0bf8",
    "azure-code": "54e9a6d2a4bd06ba1e060304b900abbc74cbea53de96506e60fe5bb4f2277fb6",
    "mooncake-conv": "b8cbb061a85206d729d91cdc2981f43c9e0d99209dce588d3af5f7934408b9df",
}
# Read off the published files: requests, total prompt and output tokens, the first and last
# rows' (prompt, output) tokens and the last arrival in seconds from the first.
SOURCE_ROWS = {
    "azure-conv": (19366, 22361870, 4088665, (374, 44), (197, 183), 3501.721937),
    "azure-code": (8819, 18059974, 245896, (4808, 10), (549, 173), 3435.948056),
    "mooncake-conv": (12031, 144793823, 4122048, (6758, 500), (20774, 508), 3536.999),
}


@pytest.mark.parametrize("name", SHIPPED_TRACES)
def test_each_shipped_file_holds_the_published_bytes(name):
    content = gzip.decompress(shipped_trace(name).read_bytes())
    assert hashlib.sha256(content).hexdigest() == PUBLISHED_SHA256[name]


@pytest.mark.parametrize("name", SHIPPED_TRACES)
def test_each_shipped_trace_loads_as_its_source_rows(name):
    n, prompt_sum, output_sum, first, last, span_s = SOURCE_ROWS[name]
    trace = load_trace(shipped_trace(name), SHIPPED_TRACES[name][1])
    assert len(trace) == n
    assert (trace.prompt_tokens.sum(), trace.output_tokens.sum()) == (prompt_sum, output_sum)
    assert (trace.prompt_tokens[0], trace.output_tokens[0]) == first
    assert (trace.prompt_tokens[-1], trace.output_tokens[-1]) == last
    assert trace.arrival_s[0] == 0 and trace.arrival_s[-1] == pytest.approx(span_s, abs=1e-9)


def test_the_mooncake_block_hashes_stay_in_the_shipped_file():
    with gzip.open(shipped_trace("mooncake-conv"), "rt", encoding="utf-8") as f:
        first = json.loads(f.readline())
    assert first["hash_ids"] == list(range(14))  # 6,758 prompt tokens: 14 blocks of 512


def test_the_data_readme_gives_each_file_a_source_licence_and_citation():
    readme = (DATA / "README.md").read_text(encoding="utf-8")
    for name, (file, _) in SHIPPED_TRACES.items():
        assert f"`{name}`" in readme and f"`{file}`" in readme
    for words in ("CC-BY 4.0", "Splitwise", "ISCA 2024", "Apache License 2.0", "Mooncake",
                  "FAST 2025"):
        assert words in readme


def test_the_package_data_installs_every_shipped_file():
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"]["sim"]
    sim_dir = ROOT / "sim"
    installed = {path for pattern in globs for path in sim_dir.glob(pattern)}
    assert {DATA / file for file, _ in SHIPPED_TRACES.values()} | {DATA / "README.md"} <= installed


def test_built_in_trace_scenarios_name_shipped_traces():
    for name in ("azure-conv", "azure-code"):
        trace = scenarios.load(name).base.workload.trace
        assert trace.name == name and Path(trace.path) == shipped_trace(name)


def test_no_code_reads_the_trace_folder_beside_the_repository():
    folder = "shared" + "/traces"  # split, so that this file does not name it
    for top in ("engine", "sim", "scenarios", "reports", "benchmarks", "tests"):
        for path in (ROOT / top).rglob("*"):
            if path.suffix in (".py", ".toml"):
                assert folder not in path.read_text(encoding="utf-8"), path


RUN_BUILT_INS = """
import sys
import scenarios, sim
assert sim.__file__.startswith(sys.argv[1]), sim.__file__
for name in ("azure-conv", "azure-code"):
    scenario = scenarios.load(name, ["workload.trace.max_requests=30"])
    assert scenario.base.workload.trace.path.startswith(sys.argv[1])
    runs = sim.simulate(scenario)
    print(name, [len(recorder.request_columns()["arrival_s"]) for _, recorder in runs])
"""


def test_built_in_trace_scenarios_run_from_a_copy_with_nothing_beside_it(tmp_path):
    copy, elsewhere = tmp_path / "checkout", tmp_path / "elsewhere"
    for package in ("engine", "sim", "scenarios", "reports"):
        shutil.copytree(ROOT / package, copy / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(copy)}
    done = subprocess.run([sys.executable, "-c", RUN_BUILT_INS, str(copy)], cwd=elsewhere,
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["azure-conv [30, 30]", "azure-code [30, 30]"]
