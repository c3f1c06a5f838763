"""The README works exactly as written: every shell command of its `sh` blocks runs (with short
settings: fewer requests, sent closer where served in real time, a tiny model for profiling
and validation), every `console` block prints what it shows, every Python block runs and prints
the output written under it, the default run prints the README's table, and every command or
flag the prose and the synopsis name exists.

The blocks run in the README's order in one working folder (so `my-chat.toml`, written from its
TOML block, is there for the commands that use it, and the profile is measured before
`validate` uses it), with the environment's `bin/` first on the PATH, as after activating it.
`make` lines are checked against the Makefile's targets rather than run: `make test` is this
suite.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
BLOCKS = [(info, text) for info, text in FENCE.findall(README)]
TINY = ["vocab_size=64", "d_model=32", "n_layers=2", "n_heads=2", "d_ff=64",
        "max_seq_len=4096"]


def short(argv: list[str]) -> list[str]:
    """The command with settings that keep the suite short (later flags win)."""
    if argv[:2] == ["servesim", "run"]:
        return argv + ["--num-prompts", "20", "--quiet"]
    if argv[:2] == ["servesim", "search"]:
        return argv + ["--num-prompts", "60", "--quiet"]
    if argv[:2] == ["servesim", "profile"]:
        return argv + ["--model", *TINY, "--out", "profile.json", "--quiet"]
    if argv[:2] == ["servesim", "validate"]:  # served in real time: its arrivals closer
        return argv + ["--num-prompts", "8", "--request-rate", "8", "--quiet",
                       "--set", *(f"model.{kv}" for kv in TINY)]
    return argv


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("readme")
    for name in ("examples", "benchmarks"):
        (folder / name).symlink_to(ROOT / name)
    return folder


def run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    bin_dir = str(Path(sys.executable).parent)
    env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""))
    if argv[0] == "python":
        argv = [sys.executable, *argv[1:]]
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def commands(text: str) -> list[str]:
    """The command lines of an `sh` block, comments dropped."""
    lines = (re.sub(r"\s+#.*$", "", line).strip() for line in text.splitlines())
    return [line for line in lines if line and not line.startswith("#")]


@pytest.mark.parametrize("index", range(len(BLOCKS)),
                         ids=[f"{i}-{info or 'plain'}" for i, (info, _) in enumerate(BLOCKS)])
def test_every_block_works_as_written(index, workdir):
    info, text = BLOCKS[index]
    if info == "toml":
        name = text.splitlines()[0].lstrip("# ").strip()
        assert name.endswith(".toml"), "a TOML block starts with a comment naming its file"
        (workdir / name).write_text(text)
    elif info == "sh":
        for line in commands(text):
            argv = shlex.split(line)
            if argv[0] == "make":
                makefile = (ROOT / "Makefile").read_text()
                assert all(re.search(rf"^{t}:", makefile, re.M) for t in argv[1:] if "=" not in t)
            elif argv[0] == ".":
                assert (Path(sys.prefix) / argv[1].removeprefix(".venv/")).exists()
            else:
                done = run(short(argv), workdir)
                assert done.returncode == 0, f"{line}: {done.stderr[-2000:]}"
    elif info == "console":
        for command, expected in re.findall(r"^\$ (.*)\n((?:(?!\$ ).*\n?)*)", text, re.M):
            done = run(shlex.split(command), workdir)
            assert (done.stdout + done.stderr).strip() == expected.strip(), command
    elif info == "python":
        done = run(["python", "-c", text], workdir)
        assert done.returncode == 0, done.stderr[-2000:]
        shown = re.findall(r"^# (.*)$", text.rsplit("\n\n", 1)[-1], re.M)
        code_lines = [line for line in text.splitlines() if line and not line.startswith("# ")]
        if shown and text.rstrip().splitlines()[-1].startswith("# "):
            assert done.stdout.strip().splitlines() == shown, code_lines[-1]


def test_the_default_run_prints_the_readme_table(workdir):
    """`make run`'s output, as the README shows it (the whole 500-request scenario)."""
    table = next(text for info, text in BLOCKS if info == "text" and text.startswith("variant"))
    done = run(["servesim", "run", "--quiet"], workdir)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == table.strip()


def test_the_synopsis_and_the_prose_name_only_real_commands_and_flags():
    from sim.cli import build_parser

    parser = build_parser()
    helps = {name: sub.format_help() for name, sub in
             next(a for a in parser._actions if hasattr(a, "choices") and a.choices).choices.items()}
    synopsis = next(text for info, text in BLOCKS if info == "text" and
                    text.startswith("servesim run"))
    spans = re.findall(r"`(servesim [^`]*|python [^`]*)`", README)
    lines = synopsis.splitlines() + spans
    assert len(lines) > 10
    for line in lines:
        words = line.split()
        if words[0] == "python":
            assert (ROOT / words[1]).is_file(), line
            continue
        assert words[1] in helps, line
        for flag in re.findall(r"(?<![\w-])--[a-z][a-z-]*", line):
            assert flag in helps[words[1]], f"{line}: {flag}"


def test_the_serving_example_serves_and_validates_the_same_server(workdir):
    """The README's `servesim serve ...`, then its `bench` and `validate --against` lines
    against that server, as written but on a free port, with a tiny model and few requests."""
    blocks = [text for info, text in BLOCKS if info == "text"]
    lines = [line for text in blocks for line in text.splitlines()]
    serve_line = next(line for line in lines if line.startswith("servesim serve kv-pressure"))
    client_lines = [line for line in lines if line.startswith("servesim bench http") or
                    line.startswith("servesim validate") and "--against http" in line]
    serve = shlex.split(re.sub(r"\s+#.*$", "", serve_line).replace("--port 8000", "--port 0"))
    model = [f"model.{kv}" for kv in TINY]  # as `short` validates (its profile is cached)
    bin_dir = str(Path(sys.executable).parent)
    env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""))
    log = workdir / "serve-stderr.txt"
    with open(log, "w") as stderr:
        process = subprocess.Popen(serve + ["--set", *model], cwd=workdir, env=env,
                                   stderr=stderr, text=True)
    try:
        deadline = time.monotonic() + 120
        url = None
        while url is None:
            assert time.monotonic() < deadline and process.poll() is None, log.read_text()
            found = re.search(r", on (http://\S+)$", log.read_text(), re.M)
            url = found.group(1) if found else time.sleep(0.05)
        assert "(variant 128-blocks)" in log.read_text()
        assert len(client_lines) == 3  # bench at the scenario's rate, bench capped, validate
        for i, line in enumerate(client_lines):
            line = re.sub(r"\s+#.*$", "", line).replace("http://127.0.0.1:8000", url)
            argv = [a if a != "100" else "6" for a in shlex.split(line)]  # --num-prompts: a few
            if "--max-concurrency" not in argv:  # that line sends every request at once
                argv += ["--request-rate", "6"]
            done = run(argv + ["--quiet", "--set", *model, "--out",
                               str(workdir / f"{argv[1]}-{i}")], workdir)
            assert done.returncode == 0, f"{line}: {done.stderr[-2000:]}"
    finally:
        process.terminate()
        process.wait(timeout=30)
