"""Runs the python blocks of one docs page in order, in this one interpreter (so importing
rltrain is paid once per page, not once per block): ``python run_blocks.py BLOCKS.json``, where
the file holds ``[[where, code], ...]``. Each block runs in a fresh namespace, as a script of its
own would; the first that raises is named on stderr with its traceback, and the exit status is
1."""

from __future__ import annotations

import json
import sys
import traceback


def main(path: str) -> int:
    with open(path, encoding="utf-8") as file:
        blocks = json.load(file)
    for where, code in blocks:
        try:
            exec(compile(code, where, "exec"), {"__name__": "__main__"})
        except SystemExit as error:
            if error.code not in (0, None):
                print(f"{where} exited with {error.code}", file=sys.stderr)
                return 1
        except BaseException:
            print(f"{where} failed:\n{traceback.format_exc()}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
