"""Write docs/scenarios/cli-reference.md from the command line's own parser, so the reference
cannot drift from the flags (tests/test_cli_flags.py compares the file with a fresh rendering).

    python docs/scenarios/cli_reference.py
"""

from __future__ import annotations

import argparse
from pathlib import Path

from sim.cli import build_parser

OUT = Path(__file__).resolve().parent / "cli-reference.md"


def reference_text() -> str:
    parser = build_parser()
    lines = ["# `servesim` command-line reference", "",
             "Generated from the parser by `docs/scenarios/cli_reference.py`; what each command "
             "does is in [cli.md](cli.md).", ""]
    lines += _options(parser, "servesim")
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {choice.dest: choice.help for choice in commands._choices_actions}
    for name, sub in commands.choices.items():
        lines += [f"## `servesim {name}`", "", helps.get(name, ""), "",
                  "```", sub.format_usage().strip().replace("usage: ", ""), "```", ""]
        lines += _options(sub, f"servesim {name}")
    return "\n".join(lines).rstrip() + "\n"


def _options(parser, prog: str) -> list[str]:
    rows = []
    for action in parser._actions:
        if isinstance(action, (argparse._SubParsersAction, argparse._HelpAction)):
            continue
        names = ", ".join(f"`{o}`" for o in action.option_strings) or f"`{action.dest}`"
        metavar = action.metavar or (action.dest.upper() if action.nargs != 0 else "")
        if action.option_strings and metavar and action.nargs != 0:
            names += f" {metavar}"
        shown = action.default not in (None, False, argparse.SUPPRESS) and \
            "(default" not in (action.help or "")
        default = f" (default: {action.default})" if shown else ""
        rows.append(f"| {names.replace('|', chr(92) + '|')} | "
                    f"{(action.help or '').replace('|', '/')}{default} |")
    if not rows:
        return []
    return ["| option | meaning |", "|---|---|", *rows, ""]


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    OUT.write_text(reference_text())
    print(f"wrote {OUT}")
