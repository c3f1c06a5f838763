"""The profile cache: one profile per machine fingerprint, in the user's cache folder, so that
`servesim validate --profile auto` profiles a machine once and reuses the result.

The folder is `$SERVESIM_CACHE`, else `$XDG_CACHE_HOME/servesim`, else `~/.cache/servesim`;
profiles live in its `profiles/` as `<fingerprint key>.json`. A profile is written to a
temporary file and renamed into place, so a cache file is whole or absent. The cache also
remembers which foreign profiles `servesim run` has warned about (`warned_once`).
"""

from __future__ import annotations

import os
from pathlib import Path


def folder() -> Path:
    if os.environ.get("SERVESIM_CACHE"):
        return Path(os.environ["SERVESIM_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "servesim"


def profile_file(key: str) -> Path:
    return folder() / "profiles" / f"{key}.json"


def store(key: str, text: str) -> Path:
    """Write a profile's text for a fingerprint key, atomically; returns its path."""
    path = profile_file(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(f".tmp{os.getpid()}")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)
    return path


def unwritable() -> str | None:
    """Why no profile can be stored in the cache (a file where its folder goes, a folder
    without write permission), or None when one can."""
    place = folder() / "profiles"
    try:
        place.mkdir(parents=True, exist_ok=True)
        if not os.access(place, os.W_OK | os.X_OK):
            return f"{place}: no permission to write there"
    except OSError as exc:
        return f"{place}: {exc.strerror or exc}"
    return None


def holds_full(key: str) -> bool:
    """Whether the cache holds a full (not `--quick`) profile for this key: a quick profile
    never replaces one."""
    import json

    try:
        return json.loads(profile_file(key).read_text(encoding="utf-8"))["fit"]["quick"] is False
    except (OSError, ValueError, KeyError, TypeError):
        return False


def warned_once(name: str) -> bool:
    """True the first time `name` is asked about on this machine (and remembers it); False
    after. Where the cache cannot be written, always True (better a repeated note than none)."""
    marker = folder() / "warned" / name
    if marker.exists():
        return False
    try:
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()
    except OSError:
        pass
    return True
