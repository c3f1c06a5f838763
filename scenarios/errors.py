"""The one exception a scenario can raise: a one-line message naming the file, the key and what
is allowed. The CLI prints it without a traceback and exits with status 2."""

from __future__ import annotations


class ScenarioError(ValueError):
    """A scenario file, a variant, a sweep or a `--set` override that cannot run."""

    def __init__(self, message: str):
        assert "\n" not in message, "scenario errors are one line"
        super().__init__(message)


class FieldError(ValueError):
    """A bad value at a dotted key; the loader adds the file and the context. Without a key,
    `problem` already names it (messages of the simulator's own config checks)."""

    def __init__(self, key: str, problem: str):
        super().__init__(f"{key}: {problem}" if key else problem)
        self.key = key
        self.problem = problem
