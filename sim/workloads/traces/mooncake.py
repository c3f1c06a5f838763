"""Format "mooncake": the Mooncake traces (Qin et al., "Mooncake", FAST 2025), JSON lines

    {"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1, ...]}

with `timestamp` in milliseconds from the start of the recording (in arrival order),
`input_length` the prompt's tokens and `output_length` the tokens to generate. `hash_ids` name
the prompt's 512-token blocks (two requests with the same first k ids share their first k x 512
prompt tokens): they are left in the file for prefix caching and not read here, so a row needs
only the three other keys.
"""

from __future__ import annotations

from .table import Columns, read_json_lines
from .trace import Trace

COLUMNS = Columns("mooncake", "timestamp", "input_length", "output_length", unit_s=1e-3)
KIND = "a JSON-lines file"


def read(path, f, max_rows: int | None) -> Trace:
    """The first `max_rows` requests (all when None) of the open file `f`."""
    return read_json_lines(path, f, max_rows, COLUMNS)
