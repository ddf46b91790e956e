"""Print docs/bad_input.md's table: every bad input in tests/scenarios/test_bad_input.py, and
its error.

    python scripts/bad_input_table.py > docs/bad_input.md
"""

from __future__ import annotations

import importlib.util
import re
import sys
import tempfile
import warnings
from pathlib import Path

import torch

TESTS = Path(__file__).resolve().parent.parent / "tests" / "scenarios" / "test_bad_input.py"

HEADER = """# Bad input and the errors it gets

Every row was produced by running the case in `tests/scenarios/test_bad_input.py` (the test
suite checks
each message, and that this table lists every case). Regenerate with
`python scripts/bad_input_table.py > docs/bad_input.md`. Paths are shown as `<run_dir>`.

Errors found before training (settings, config files, environments, spaces, checkpoints and
their manifests, run directories) are raised before any file is written; the test suite checks
that every file is left as it was. Errors found while training (non-finite observations, rewards
or losses) name the env step or gradient step. A `UserWarning` row is a warning, not an error:
the run goes on (or, for an unusable manifest, falls back to the checkpoint files in the folder).

Non-finite losses have a setting, `Trainer(on_nan_loss=...)`: `"stop"` (default) skips the
update, stops the run and keeps the last good checkpoint as `last` (no checkpoint is written
after the bad loss); `"skip"` drops such updates with a warning and trains on; `"raise"` raises
the error in the table.

| bad input | error | message |
|---|---|---|"""


def main() -> None:
    torch.set_num_threads(1)
    sys.path.insert(0, str(TESTS.parent.parent))  # the cases import tests/conftest.py's QUIET
    spec = importlib.util.spec_from_file_location("test_bad_input", TESTS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being defined
    spec.loader.exec_module(module)
    print(HEADER)
    failed: list[str] = []
    for case in module.CASES:
        with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            run_dir = Path(tmp) / "run"
            if case.setup is not None:
                case.setup(run_dir)
            try:
                case.run(run_dir)
            except Exception as error:  # a row for whatever it raises; a mismatch fails below
                message = str(error).replace(str(run_dir), "<run_dir>")
                if type(error) is not case.error or not re.search(case.message, str(error)):
                    failed.append(f"{case.name}: {type(error).__name__}: {message}")
                message = message.replace("|", "\\|").replace("\n", " ")
                print(f"| {case.name} | `{type(error).__name__}` | {message} |")
            else:
                failed.append(f"{case.name}: no error raised")
            if case.after is not None and not case.after(run_dir):
                failed.append(f"{case.name}: its after-check failed")
    for failure in failed:
        print(f"not as tests/scenarios/test_bad_input.py expects: {failure}", file=sys.stderr)
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
