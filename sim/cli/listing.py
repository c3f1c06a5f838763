"""`servesim scenarios`: the built-in scenarios, each with its description; the default marked.
"""

from __future__ import annotations

import textwrap


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("scenarios", help="list the built-in scenarios")
    parser.set_defaults(func=cmd_scenarios)


def cmd_scenarios(args) -> int:
    import scenarios

    for name, description in scenarios.list_builtin():
        default = " (default)" if name == scenarios.DEFAULT_SCENARIO else ""
        print(f"{name}{default}")
        print(textwrap.indent(textwrap.fill(description, 92), "    "))
    return 0
