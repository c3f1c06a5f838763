"""The versions of the measured kernel tables: each framework's collections are folders named by
version under each table family (`<system>/<family>/<framework>/<version>/`), ordered as
packaging orders versions (`version_key`).
"""

from __future__ import annotations

import re
from pathlib import Path


def version_key(version: str) -> tuple:
    """Order of versions, as packaging orders them: 0.5.6.post2 < 0.5.10, 1.3.0rc20 < 1.3.0rc23
    < 1.3.0 (a release candidate before its release, a post-release after)."""
    match = re.match(r"(\d+(?:\.\d+)*)\.?([a-z]*)(\d*)", version)
    if match is None:
        return ((), 0, 0)
    numbers = tuple(int(part) for part in match.group(1).split("."))
    rank = {"dev": -3, "a": -2, "b": -2, "rc": -1, "": 0, "post": 1}.get(match.group(2), 0)
    return (numbers, rank, int(match.group(3) or 0))


def version_dirs(folder: Path) -> list[str]:
    """The versions a folder of collections holds (its subfolders), oldest first."""
    if not folder.is_dir():
        return []
    return sorted((p.name for p in folder.iterdir() if p.is_dir()), key=version_key)
