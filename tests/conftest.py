"""Shared test settings: one torch thread (small MLPs, 2-core CI)."""

import torch

torch.set_num_threads(1)
