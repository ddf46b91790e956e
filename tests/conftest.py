"""Shared test settings: one torch thread (small MLPs, 2-core CI), and ``QUIET``."""

from typing import Any

import torch

torch.set_num_threads(1)

#: ``Trainer(**QUIET)``: every built-in output off (no TensorBoard, progress bar, console lines
#: or metrics.jsonl); checkpoints and summary.json are still written.
QUIET: dict[str, Any] = dict(logger=False, enable_progress_bar=False, enable_console=False,
                             enable_metrics_file=False)
