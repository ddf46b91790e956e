"""Seeding, and the global random generators as one checkpointable component."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

#: Evaluation environments reset with ``seed + EVAL_SEED_OFFSET``, apart from the training envs.
EVAL_SEED_OFFSET = 1_000_003


@dataclass(frozen=True)
class Seeds:
    """Every seed of a run, derived from one (the strategy's) by :func:`derive_seeds`.

    Attributes:
        globals: Python's, NumPy's and torch's global generators (the agent's initial weights,
            epsilon-greedy draws), seeded when the agent is built and when the run starts.
        envs: The training envs' resets (sub-env ``i``: ``envs + i``, its spaces too) and the
            vector env's action space (warm-up actions).
        storage: The replay sampler.
        evaluation: The evaluation envs' resets (every evaluation starts from the same states).
    """

    globals: int
    envs: int
    storage: int
    evaluation: int


def derive_seeds(seed: int, rank: int = 0) -> Seeds:
    """The seeds of a run of ``seed`` in the process of global ``rank``: the one place they
    are derived. Rank 0 (and a run of one process) uses ``seed`` itself; every other rank
    draws its own from NumPy's ``SeedSequence(seed, spawn_key=(rank,))``, so ranks collect
    different experience (their own envs, exploration and replay sampling) and a run of N
    processes gets the same N streams every time. The evaluation runs on rank 0 only."""
    if rank:
        seed = int(np.random.SeedSequence(seed, spawn_key=(rank,)).generate_state(1)[0]) >> 1
    return Seeds(globals=seed, envs=seed, storage=seed, evaluation=seed + EVAL_SEED_OFFSET)


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's global and torch's random generators."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


class GlobalRandomState:
    """The process-wide generators (Python ``random``, NumPy's global, torch CPU and CUDA).

    ``state_dict`` returns tensors and plain numbers only, so a checkpoint holding it loads with
    ``torch.load(weights_only=True)``.
    """

    def state_dict(self) -> dict[str, Any]:
        """The generators' states."""
        version, internal, gauss = random.getstate()
        legacy = np.random.get_state(legacy=False)
        state: dict[str, Any] = {
            "python": {"version": version, "internal": torch.tensor(internal, dtype=torch.int64),
                       "gauss": gauss},
            "numpy": {"key": torch.from_numpy(legacy["state"]["key"].astype(np.int64)),
                      "pos": int(legacy["state"]["pos"]),
                      "has_gauss": int(legacy["has_gauss"]),
                      "gauss": float(legacy["gauss"])},
            "torch": torch.get_rng_state(),
        }
        if torch.cuda.is_available():
            state["cuda"] = torch.cuda.get_rng_state_all()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
        python = state["python"]
        random.setstate((int(python["version"]), tuple(int(v) for v in python["internal"]),
                         python["gauss"]))
        numpy_state = state["numpy"]
        np.random.set_state({
            "bit_generator": "MT19937",
            "state": {"key": numpy_state["key"].numpy().astype(np.uint32),
                      "pos": int(numpy_state["pos"])},
            "has_gauss": int(numpy_state["has_gauss"]),
            "gauss": float(numpy_state["gauss"]),
        })
        torch.set_rng_state(state["torch"])
        if "cuda" in state and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda"])
