"""Reading back the records rltrain writes beside its runs (``seeds.json``, ``tune.json``,
``metrics.jsonl``) as untrusted input: bounded in size, numbers bounded in digits and
magnitude, every refusal naming the file (and line)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

#: The largest JSON record read whole (rltrain writes a few KB; a study's config included).
MAX_RECORD_BYTES = 1 << 20
#: The longest ``metrics.jsonl`` line read (rltrain writes rows of a few hundred bytes).
MAX_LINE_BYTES = 1 << 20
#: Digits of the longest integer a record may hold (Python refuses 4,300 with no file named).
MAX_DIGITS = 30
#: The largest magnitude of a step, return or time read from a record: beyond what a run
#: records, and far from float64's overflow when summed or averaged.
MAX_MAGNITUDE = 1e15


def read_bounded(path: Path, limit: int = MAX_RECORD_BYTES) -> str:
    """The text of ``path``, refused when larger than ``limit`` bytes or not UTF-8."""
    with path.open("rb") as file:
        data = file.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"it is larger than {limit:,} bytes (rltrain writes a few KB)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"it is not UTF-8 text ({error})") from None


def refuse_unknown_fields(record: dict[str, Any], fields: set[str]) -> None:
    """Refuse a record holding fields besides ``fields`` (what rltrain writes)."""
    extra = sorted(set(record) - fields)
    if extra:
        raise ValueError(f"it holds fields rltrain never writes ({', '.join(extra)[:200]})")


def bounded_int(text: str) -> int:
    """A JSON integer of at most :data:`MAX_DIGITS` digits (``json.loads(parse_int=...)``)."""
    if len(text.lstrip("-")) > MAX_DIGITS:
        raise ValueError(f"it holds an integer of {len(text.lstrip('-')):,} digits; rltrain "
                         f"writes at most {MAX_DIGITS}")
    return int(text)


def plain_number(value: Any) -> bool:
    """Whether ``value`` is a finite number (not a bool) of magnitude at most
    :data:`MAX_MAGNITUDE`."""
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value) and abs(value) <= MAX_MAGNITUDE)


def lines(path: Path, limit: int = MAX_LINE_BYTES) -> Iterator[tuple[int, bytes, bool]]:
    """``(number, line, ended)`` for each line of ``path``, read one at a time (never the
    whole file); ``ended``: the line has its newline. A line longer than ``limit`` bytes is
    refused naming its number."""
    with path.open("rb") as file:
        number = 0
        while True:
            raw = file.readline(limit + 1)
            if not raw:
                return
            number += 1
            if len(raw) > limit and not raw.endswith(b"\n"):
                raise ValueError(f"{path}:{number} is longer than {limit:,} bytes (rltrain's "
                                 "rows are a few hundred); it was not written by rltrain, or "
                                 "it was altered.")
            ended = raw.endswith(b"\n")
            yield number, raw.rstrip(b"\r\n"), ended
