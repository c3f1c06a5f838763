"""The values `--sweep` and `--set` take, split where the command line meets them:
`--sweep KEY=V1,V2,...` at its top-level commas, so a value may hold commas (a string, an array,
a table), and `--set K=V K2=V2 SCENARIO` at the words that are KEY=VALUE, so it never swallows
the scenario after it. Every mistake is one line (`FlagError`)."""

from __future__ import annotations

from .flag_types import FlagError


def sweep_flags(items) -> dict:
    """{dotted key: [values]} from KEY=V1,V2,... strings (each value parsed as TOML)."""
    from scenarios.overrides import dotted_key, parse_value

    sweep = {}
    for item in items:
        key, sep, values = item.partition("=")
        key = dotted_key(key)
        if not sep or not key or not values.strip():
            raise FlagError(f"--sweep {item}: expected KEY=V1,V2,... e.g. "
                            f"workload.arrival.rate=1,2,4")
        if key in sweep:
            raise FlagError(f"--sweep {key} is given twice; give all its values in one")
        pieces = sweep_values(values, f"--sweep {item}")
        sweep[key] = [parse_value(piece) for piece in pieces]
    return sweep


def sweep_values(text: str, where: str) -> list[str]:
    """`text` split at its commas outside strings, arrays and tables, so a value may hold
    commas (`"a,b"`, `[1, 2]`, `{low = 1, high = 2}`); each piece stripped, none empty. A quote
    opens a string where a TOML value starts (after a comma, `[`, `{` or `=`), so a bare word
    may hold an apostrophe."""
    pieces, opened, quote, start, i = [], [], "", 0, 0
    while i < len(text):
        char = text[i]
        if quote:
            if char == "\\" and quote[0] == '"':
                i += 1  # the escaped character cannot close the string
            elif text.startswith(quote, i):
                i += len(quote) - 1
                quote = ""
        elif char in "\"'" and text[start:i].rstrip()[-1:] in ("", ",", "[", "{", "="):
            quote = char * 3 if text.startswith(char * 3, i) else char  # """...""" too
            i += len(quote) - 1
        elif char in "[{":
            opened.append(char)
        elif char in "]}":
            match = "[" if char == "]" else "{"
            if not opened or opened[-1] != match:
                what = f"'{opened[-1]}'" if opened else "nothing"
                raise FlagError(f"{where}: '{char}' closes {what}")
            opened.pop()
        elif char == "," and not opened:
            pieces.append(text[start:i])
            start = i + 1
        i += 1
    if quote or opened:
        what = f"a string opened with {quote}" if quote else f"'{opened[-1]}'"
        raise FlagError(f"{where}: {what} is never closed")
    pieces = [piece.strip() for piece in pieces + [text[start:]]]
    if "" in pieces:
        raise FlagError(f"{where}: an empty value between commas")
    return pieces


def split_set_values(argv: list[str]) -> list[str]:
    """`--set K=V K2=V2 SCENARIO` as `--set=K=V --set=K2=V2 SCENARIO`: --set takes the words
    after it that are KEY=VALUE, so it never swallows the scenario that follows."""
    out, i = [], 0
    while i < len(argv):
        if argv[i] == "--set":
            i += 1
            taken = 0
            while i < len(argv) and "=" in argv[i] and not argv[i].startswith("-"):
                out.append(f"--set={argv[i]}")
                i += 1
                taken += 1
            if not taken:
                out.append("--set")  # argparse says what is missing
            continue
        out.append(argv[i])
        i += 1
    return out
