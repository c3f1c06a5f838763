"""Format "sharegpt": ShareGPT-style conversations, the dataset vLLM's `bench serve` samples
its prompts from. It gives each request's lengths, not its arrival time.

A JSON list of entries `{"conversations": [{"from": "human", "value": text}, {"from": "gpt",
"value": text}, ...], ...}` (other keys, such as "id", are not read). An entry's request is its
first human turn (the prompt) and the next gpt turn after it (the reply, whose length is the
number of tokens to generate), counted by a tokenizer:
- "char" (default): one token per character, as the engine's tokenizer (`engine.tokenizer`)
  encodes text, and a prompt's "<bos>" first, as the engine's servers encode a prompt (and as
  vLLM's benchmark counts a prompt, with its tokenizer's special tokens): a prompt of n
  characters is n + 1 prompt tokens, a reply of n characters n tokens;
- "whitespace": one token per whitespace-separated word;
- or any function from text to a token count (through `load_trace` only).
An entry without such a pair, or whose pair has a turn of blank text, holds no request: it is
counted in `Trace.skipped`, not read (vLLM likewise skips conversations of fewer than two turns).
A malformed entry (not an object, no "conversations" list, a turn without string "from" and
"value", a key given twice) is an error naming the line it starts on and its index.

vLLM's benchmark pairs `conversations[0]` and `[1]` whatever their roles; servesim pairs the
first "human" turn with the next "gpt" turn, so an entry that opens with a "gpt" turn or names
its roles otherwise ("user", "assistant") is skipped here where vLLM would read it.
"""

from __future__ import annotations

import json
import re

import numpy as np

from .files import TOO_LONG, DuplicateKey, _unique_keys
from .trace import Trace, check_tokens, shorten

TOKENIZERS = {"char": len, "whitespace": lambda text: len(text.split())}
BOS_TOKENS = {"char": 1}  # tokens a tokenizer puts before a prompt's text
KIND = "a JSON file"
_BLANK = re.compile(r"[ \t\n\r]*")  # JSON's whitespace


def read(path, text: str, tokenizer="char") -> Trace:
    """Every request of a ShareGPT file's text, in the file's order (no arrival times)."""
    count = TOKENIZERS.get(tokenizer, tokenizer) if isinstance(tokenizer, str) else tokenizer
    if not callable(count):
        raise ValueError(f"workload.trace.tokenizer must be one of {', '.join(TOKENIZERS)} "
                         f"(or a function from text to a token count), got {tokenizer!r}")
    bos = BOS_TOKENS.get(tokenizer, 0) if isinstance(tokenizer, str) else 0
    prompts, outputs, skipped = [], [], 0
    for line, index, entry in _entries(path, text):
        pair = _exchange(path, line, index, entry)
        if pair is None:
            skipped += 1
            continue
        for tokens, role, counted in ((prompts, "human", bos + count(pair[0])),
                                      (outputs, "gpt", count(pair[1]))):
            tokens.append(check_tokens(path, line, f"entry {index}: the {role} turn's token "
                                                   f"count", counted))
    if not prompts:
        raise ValueError(f"{path}: no entry has a human turn followed by a gpt turn, so the "
                         f"trace has no requests (format sharegpt)")
    return Trace(None, np.array(prompts, dtype=np.int64), np.array(outputs, dtype=np.int64),
                 skipped)


def _exchange(path, line: int, index: int, entry) -> tuple[str, str] | None:
    """(prompt, reply) texts of an entry, or None when it holds no request."""
    turns = entry.get("conversations") if isinstance(entry, dict) else None
    if not isinstance(turns, list):
        raise ValueError(f"{path}: line {line}: entry {index}: expected an object with a "
                         f"\"conversations\" list (format sharegpt), got {_kind(entry)}")
    for number, turn in enumerate(turns):
        if not (isinstance(turn, dict) and isinstance(turn.get("from"), str)
                and isinstance(turn.get("value"), str)):
            raise ValueError(f"{path}: line {line}: entry {index}: conversations[{number}] must "
                             f"be an object with string \"from\" and \"value\", got "
                             f"{_kind(turn)}")
    roles = [turn["from"] for turn in turns]
    if "human" not in roles or "gpt" not in roles[roles.index("human"):]:
        return None
    human = roles.index("human")
    prompt, reply = turns[human]["value"], turns[roles.index("gpt", human)]["value"]
    return None if not prompt.strip() or not reply.strip() else (prompt, reply)


def _kind(value) -> str:
    return shorten(json.dumps(value))


def _entries(path, text: str):
    """(line, index, entry) for each element of the file's top-level JSON list, decoded one at
    a time so that an error can name the line the element starts on."""
    decoder = json.JSONDecoder(object_pairs_hook=_unique_keys)
    counted, line = 0, 1

    def line_at(pos: int) -> int:  # positions only grow, so the text is counted once
        nonlocal counted, line
        line, counted = line + text.count("\n", counted, pos), pos
        return line

    pos = _BLANK.match(text).end()
    if pos == len(text):
        raise ValueError(f"{path}: the file is empty (format sharegpt is a JSON list of "
                         f"conversations)")
    if text[pos] != "[":
        raise ValueError(f"{path}: line {line_at(pos)}: expected a JSON list of conversations "
                         f"(format sharegpt), got {shorten(text[pos:pos + 60])!r}")
    pos, index = _BLANK.match(text, pos + 1).end(), 0
    while not text.startswith("]", pos):  # [] holds no entry
        try:
            entry, end = decoder.raw_decode(text, pos)
        except DuplicateKey as exc:
            raise ValueError(f"{path}: line {line_at(pos)}: entry {index}: the key "
                             f"{exc.args[0]!r} is given twice in one object") from None
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: line {exc.lineno}: not JSON ({exc.msg} at column "
                             f"{exc.colno})") from None
        except ValueError:  # an integer past Python's 4,300 digits
            raise ValueError(f"{path}: line {line_at(pos)}: entry {index}: {TOO_LONG}") \
                from None
        yield line_at(pos), index, entry
        pos, index = _BLANK.match(text, end).end(), index + 1
        if text.startswith(",", pos):
            pos = _BLANK.match(text, pos + 1).end()
            if text.startswith("]", pos):
                raise ValueError(f"{path}: line {line_at(pos)}: a comma after the last entry "
                                 f"(not JSON)")
        elif not text.startswith("]", pos):
            raise ValueError(f"{path}: line {line_at(pos)}: expected , or ] after entry "
                             f"{index - 1} (format sharegpt is a JSON list)")
    if _BLANK.match(text, pos + 1).end() != len(text):
        raise ValueError(f"{path}: line {line_at(pos)}: more after the end of the JSON list")
