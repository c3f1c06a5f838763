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
CLI_SHARED = {"sim.cli.common", "sim.cli.flags", "sim.cli.flag_types", "sim.cli.flag_values",
              "sim.cli.vllm_flags", "sim.cli.client_flags", "sim.cli.result_flags"}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path):
    """(module, [names]) of each import statement of a file: `import a.b` is ("a.b", []),
    `from x import y, z` is (x, ["y", "z"]) with a relative x resolved."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, []
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1])
                base = f"{parent}.{base}" if base else parent
            yield base, [alias.name for alias in node.names]


def imported_names(path: Path) -> set[str]:
    """Every module a file imports (and every `module.name` of a `from module import name`,
    which may be a module too), relative imports resolved."""
    names = set()
    for base, members in imports(path):
        names |= {base} | {f"{base}.{member}" for member in members}
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


# --- the packages' import graph (docs/architecture.md, "Packages and their imports") ----------

PACKAGES = ("engine", "scenarios", "reports", "sim")
MAY_IMPORT = {"engine": set(), "scenarios": {"engine"}, "reports": {"engine", "scenarios"},
              "sim": {"engine", "scenarios", "reports"}}


def module_graph() -> dict[str, set[str]]:
    """{module: the project modules it imports}, over every module of the four packages (an
    import inside a function counts: a circle broken only by importing late is still one)."""
    files = {module_name(path): path for package in PACKAGES
             for path in (ROOT / package).rglob("*.py")}
    return {name: project_imports(path, files) - {name} for name, path in files.items()}


def project_imports(path: Path, files) -> set[str]:
    """The modules of `files` a file imports: `from package import module` imports that
    module, `from package import name` the package's `__init__`."""
    found = set()
    for base, members in imports(path):
        found |= {f"{base}.{m}" if f"{base}.{m}" in files else base for m in members} or {base}
    return found & set(files)


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_import_graph_has_no_circle():
    assert circles(module_graph()) == []


def test_the_circle_finder_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_each_package_imports_only_the_packages_below_it():
    for module, imported in module_graph().items():
        package = module.split(".")[0]
        for name in imported:
            assert name.split(".")[0] in MAY_IMPORT[package] | {package}, f"{module} -> {name}"
