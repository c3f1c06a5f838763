"""Rewrite tests/golden/<name>.json for every built-in scenario (or the names given):
    python tests/golden/regenerate.py [NAME ...]
Review the diff before committing: a golden file changes only with an intended change."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import scenarios  # noqa: E402
from test_golden import GOLDEN_DIR, golden_summary  # noqa: E402


def main(names: list[str]) -> None:
    for name in names or scenarios.builtin_names():
        path = GOLDEN_DIR / f"{name}.json"
        path.write_text(json.dumps(golden_summary(name), indent=1) + "\n")
        print(f"wrote {path}")


if __name__ == "__main__":
    main(sys.argv[1:])
