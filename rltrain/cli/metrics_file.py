"""A run's ``metrics.jsonl`` read back as untrusted input: whole (:func:`read_rows`) or, for a
run still being written, the rows it gained since the last read (:class:`MetricsTail`). Each
line is checked: UTF-8, a JSON object, its steps, returns and times plain numbers."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rltrain.cli.records import MAX_LINE_BYTES, MAX_MAGNITUDE, bounded_int, lines, plain_number

#: The values of a ``metrics.jsonl`` row that must be plain numbers.
NUMBERS = ("env_steps", "eval/return_mean", "time/elapsed")
#: The most of a ``metrics.jsonl`` one read of a run still being written takes.
MAX_TAIL_BYTES = 16 * MAX_LINE_BYTES


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The JSON rows of a ``metrics.jsonl`` (a last line cut short by a crash is skipped),
    read as untrusted input, one line at a time: a line that is too long, not UTF-8 or not a
    JSON object, or a row whose steps, returns or times are not plain numbers, is refused with
    its line number."""
    rows = []
    for number, raw, ended in lines(path):
        line = _decode(raw, f"{path}:{number}")
        if not line.strip():
            continue
        row = _row(line, f"{path}:{number}", last=not ended)
        if row is None:
            break
        rows.append(row)
    return rows


def _decode(raw: bytes, where: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"{where} is not UTF-8 text ({error}); it was not written by "
                         "rltrain, or it was altered.") from None


def _row(line: str, where: str, *, last: bool = False) -> dict[str, Any] | None:
    """One ``metrics.jsonl`` line as a row, checked (``where`` names it in an error); None
    for the file's ``last`` line when it is not JSON (cut short by a crash)."""
    try:
        row = json.loads(line, parse_int=bounded_int)
    except (ValueError, RecursionError) as error:
        if last and isinstance(error, json.JSONDecodeError):
            return None
        raise ValueError(f"{where} is not a JSON line: {error}.") from None
    if not isinstance(row, dict) or not all(_number(row.get(key)) for key in NUMBERS) \
            or (row.get("env_steps") or 0) < 0:
        raise ValueError(f"{where} is not a metrics row (a JSON object whose "
                         f"{', '.join(NUMBERS)} are finite numbers of magnitude at most "
                         f"{MAX_MAGNITUDE:g}, env steps not negative); it was not written by "
                         "rltrain, or it was altered.")
    return row


@dataclass
class MetricsTail:
    """The rows a ``metrics.jsonl`` still being written gained since the last :meth:`read`:
    each line is read once (a whole file read again at each poll grows with the run), and a
    last line not yet ended by its newline waits for the next read. Rows are checked as
    :func:`read_rows` checks them. A file that shrank (the run started again) is read from
    its start.

    Attributes:
        path: The ``metrics.jsonl``.
        offset: Bytes of it read so far (whole lines).
        lines: Lines read so far (for messages).
    """

    path: Path
    offset: int = 0
    lines: int = 0

    def read(self) -> list[dict[str, Any]]:
        """The rows of the lines ended since the last read."""
        try:
            with self.path.open("rb") as file:
                if file.seek(0, os.SEEK_END) < self.offset:
                    self.offset = self.lines = 0
                file.seek(self.offset)
                data = file.read(MAX_TAIL_BYTES)  # the rest waits for the next read
        except FileNotFoundError:
            return []
        whole = data[:data.rfind(b"\n") + 1]
        if not whole and len(data) > MAX_LINE_BYTES:
            raise ValueError(f"{self.path}:{self.lines + 1} is longer than {MAX_LINE_BYTES:,} "
                             "bytes (rltrain's rows are a few hundred); it was not written by "
                             "rltrain, or it was altered.")
        rows = []
        for raw in whole.splitlines():
            self.lines += 1
            line = _decode(raw, f"{self.path}:{self.lines}")
            row = _row(line, f"{self.path}:{self.lines}") if line.strip() else None
            if row is not None:
                rows.append(row)
        self.offset += len(whole)
        return rows


def _number(value: Any) -> bool:
    """Whether ``value`` is absent or a plain number (:func:`plain_number`)."""
    return value is None or plain_number(value)
