"""What `servesim bench`'s tests share: a CSV file's rows, and the command run as a user runs
it."""

from __future__ import annotations

import csv

from sim.cli import main


def rows(path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def bench_cli(capsys, url, bench_scenario, out, *flags) -> tuple[int, str]:
    """`servesim bench` run as a user runs it: (exit status, the last printed line)."""
    status = main(["bench", url, str(bench_scenario), "--out", str(out), "--quiet", *flags])
    return status, capsys.readouterr().out.rstrip("\n").splitlines()[-1]
