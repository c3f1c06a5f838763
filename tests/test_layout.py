"""How the code is laid out, checked on its syntax trees: no test module imports another (what
several share is in `tests/helpers/` or `tests/conftest.py`), and the command line
(`sim/cli/`) has no import circle (a command imports only the shared modules, never another
command; the shared modules import no command; nothing else in `sim` imports the command
line)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
CLI = ROOT / "sim" / "cli"
CLI_SHARED = {"sim.cli.common", "sim.cli.flags", "sim.cli.client_flags"}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_names(path: Path) -> set[str]:
    """Every module a file imports (and every `module.name` of a `from module import name`,
    which may be a module too), relative imports resolved."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1])
                base = f"{parent}.{base}" if base else parent
            names.add(base)
            names |= {f"{base}.{alias.name}" for alias in node.names}
    return names


def cli_imports(path: Path) -> set[str]:
    """The modules of `sim/cli/` a file imports, the package itself left out."""
    return {name for name in imported_names(path)
            if name.startswith("sim.cli.") and name.count(".") == 2}


def test_a_command_imports_only_the_shared_modules_and_they_import_no_command():
    commands = [p for p in CLI.glob("*.py") if module_name(p) not in CLI_SHARED
                and p.name not in ("__init__.py", "__main__.py")]
    assert {p.stem for p in commands} == {"run", "search", "listing", "profile", "validate",
                                          "bench", "serve"}
    for path in commands:
        assert cli_imports(path) <= CLI_SHARED, path.name
    for name in CLI_SHARED:
        path = CLI / f"{name.rpartition('.')[2]}.py"
        assert cli_imports(path) <= CLI_SHARED - {name}, path.name
    shared_graph = {name: cli_imports(CLI / f"{name.rpartition('.')[2]}.py")
                    for name in CLI_SHARED}
    assert not any(a in shared_graph[b] for a in CLI_SHARED for b in shared_graph[a])


def test_nothing_outside_the_command_line_imports_it():
    for path in (ROOT / "sim").rglob("*.py"):
        if CLI not in path.parents:
            assert not any(name == "sim.cli" or name.startswith("sim.cli.")
                           for name in imported_names(path)), path


def test_no_test_module_imports_another():
    test_modules = {path.stem for path in TESTS.glob("test_*.py")}
    importers = [*TESTS.glob("test_*.py"), *(TESTS / "helpers").glob("*.py"),
                 TESTS / "conftest.py"]
    for path in importers:
        for name in imported_names(path):
            parts = name.split(".")
            top = parts[1] if parts[0] == "tests" and len(parts) > 1 else parts[0]
            assert top not in test_modules, f"{path.relative_to(ROOT)} imports {name}"
