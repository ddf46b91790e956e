"""Shared test settings: one torch thread (small MLPs, 2-core CI), ``QUIET``, and helpers for
the exact-resume tests."""

from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

import pytest
import torch

torch.set_num_threads(1)

#: ``Trainer(**QUIET)``: every built-in output off (no TensorBoard, progress bar, console lines
#: or metrics.jsonl); checkpoints and summary.json are still written.
QUIET: dict[str, Any] = dict(logger=False, enable_progress_bar=False, enable_console=False,
                             enable_metrics_file=False)


def assert_same_tensors(a: Any, b: Any, where: str = "", skip: Collection[str] = ()) -> None:
    """Assert two checkpoint parts are equal, tensors bit for bit, naming the first difference;
    dict keys in ``skip`` are left out."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert set(a) == set(b), where
        for key in a:
            if key not in skip:
                assert_same_tensors(a[key], b[key], f"{where}/{key}", skip)
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same_tensors(x, y, f"{where}[{i}]", skip)
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def straight_and_resumed(fit: Callable[..., object], factory: pytest.TempPathFactory,
                         num_steps: int) -> tuple[Path, Path]:
    """Two run directories: ``num_steps`` trained straight, and half of them then resumed from
    ``last`` to ``num_steps``. ``fit(run_dir, num_steps, ckpt_path=None)`` trains one."""
    straight, split = factory.mktemp("straight"), factory.mktemp("split")
    fit(straight, num_steps)
    fit(split, num_steps // 2)
    fit(split, num_steps, ckpt_path="last")
    return straight, split
