"""A config.json's values as `model.config` reads them (`hf_config.py`, `hf_classes.py`): each
checked as it is read, and named in one line where it is wrong."""

from __future__ import annotations

MAX_INT = 10**9  # no size in a config.json is larger (the longest contexts are 10^7 tokens)


class ConfigValues:
    """A config.json's values (or its `text_config`'s: `within`), each checked as it is read;
    where the file leaves a key out, its class's transformers default (`defaults`)."""

    def __init__(self, table: dict, path: str, architecture: str, given: dict,
                 within: str = "", defaults: dict | None = None):
        self.table, self.path, self.architecture = table, path, architecture
        self.given = given  # the scenario's keys beside the file, which replace its own
        self.within = within  # where the keys are in the file: "" (its top) or "text_config"
        self.defaults = defaults or {}  # the class's (`hf_classes.CLASS_DEFAULTS`)

    def get(self, key: str):
        """The file's value of `key`, else its class's default (None: neither)."""
        value = self.table.get(key)
        return self.defaults.get(key) if value is None else value

    def alone(self, *keys: str) -> bool:
        """Whether the file alone sets these `Architecture` keys (the scenario sets none)."""
        return not any(key in self.given for key in keys)

    def error(self, text: str) -> ValueError:
        """The one-line error of a problem in this file."""
        within = f"{self.within}: " if self.within else ""
        return ValueError(f"model.config: {self.path}: {within}{text}")

    def int(self, key: str, default=None, minimum: int = 1) -> int:
        """An integer from `minimum` to `MAX_INT`; `default` when the key is absent or null
        (None: the key is required)."""
        value = self.get(key)
        if value is None:
            if default is None:
                nested = " at its top level; this file nests its text model's keys in " \
                    "text_config: give them as a config.json of their own, naming the text " \
                    "model's class in architectures" \
                    if isinstance(self.table.get("text_config"), dict) else ""
                raise self.error(f"missing {key!r} (a {self.architecture} "
                                 f"config.json has it{nested})")
            return default
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.error(f"{key} must be an integer >= {minimum}, "
                             f"got {value!r}")
        if value > MAX_INT:
            raise self.error(f"{key} must be at most {MAX_INT:,}, got "
                             f"{len(str(value))} digits")
        return value

    def bool(self, key: str, default: bool) -> bool:
        value = self.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.error(f"{key} must be true or false, got {value!r}")
        return value

    def list(self, key: str, item=None, allowed: str = "") -> list | None:
        """A list (None when absent), each entry passing `item` (described by `allowed`)."""
        value = self.get(key)
        if value is not None and not isinstance(value, list):
            raise self.error(f"{key} must be a list, got {value!r}")
        for entry in value or ():
            if item is not None and not item(entry):
                raise self.error(f"{key} holds {entry!r}; its entries must be "
                                 f"{allowed}")
        return value
