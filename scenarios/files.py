"""Where scenarios come from: the built-ins shipped beside this module (`builtin_names`,
`list_builtin`), a file by path (`find`), and reading one (`parse`), every way a file can be
unreadable one `ScenarioError` line.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from .errors import ScenarioError
from .specs import did_you_mean

BUILTIN_DIR = Path(__file__).resolve().parent


def builtin_names() -> list[str]:
    """The built-in scenarios' names (their files' stems), sorted."""
    return sorted(p.stem for p in BUILTIN_DIR.glob("*.toml"))


def list_builtin() -> list[tuple[str, str]]:
    """(name, description) of every built-in scenario, by name (read, not validated: listing
    works even where a scenario could not run)."""
    listing = []
    for name in builtin_names():
        path = BUILTIN_DIR / f"{name}.toml"
        raw = parse(path, display(path))
        listing.append((name, str(raw.get("description", ""))))
    return listing


def find(name_or_path) -> Path:
    """The file of a scenario: a built-in's name is the built-in (a file or folder of that name
    here is `./NAME`), anything else a path."""
    if not isinstance(name_or_path, (str, Path)):
        raise ScenarioError(f"{name_or_path!r}: a scenario is a built-in name or a path, got "
                            f"{type(name_or_path).__name__}")
    path = Path(name_or_path)
    builtin = BUILTIN_DIR / f"{name_or_path}.toml"
    if str(name_or_path) in builtin_names():  # even beside an output folder of its name
        return builtin
    if path.is_dir():
        raise ScenarioError(f"{path}: is a folder, not a scenario file")
    if path.is_file():
        return path.resolve()
    raise ScenarioError(f"{name_or_path}: no such scenario file or built-in scenario "
                        f"({did_you_mean(str(name_or_path), builtin_names())}built-ins: "
                        f"{', '.join(builtin_names())})")


def display(path: Path) -> str:
    """How errors name a scenario file: relative to the working directory where it is inside,
    else as given."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def parse(path: Path, shown: str) -> dict:
    """The file's TOML table; every way the file can be unreadable is one line."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ScenarioError(f"{shown}: cannot read it: {exc.strerror or exc}") from None
    if data.startswith(b"\xef\xbb\xbf"):  # a UTF-8 byte-order mark: not part of the text
        data = data[3:]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ScenarioError(f"{shown}: not UTF-8 text (byte {exc.start} is "
                            f"{data[exc.start:exc.start + 1].hex()}); a scenario is a TOML "
                            f"file") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"{shown}: not valid TOML: {exc}") from None
    except RecursionError:
        raise ScenarioError(f"{shown}: not valid TOML: nested too deeply") from None
