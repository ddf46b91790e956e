"""What every replay of transitions shares: the sampled batch (:class:`ReplayBatch`) and the
sampler (:class:`SampledReplay`: uniform or prioritized draws, n-step windows, prefetched
rounds, the sampler's saved state)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import torch

from rltrain.buffers.observations import map_obs
from rltrain.buffers.sampling import Prioritized, PriorityFeedback, n_step_window
from rltrain.settings.replay import PriorityConfig

if TYPE_CHECKING:
    from rltrain.types import ObsTensors


class ReplayBatch(NamedTuple):
    """A sampled batch as tensors on the learner's device (first dimension: batch).

    ``terminated`` and ``truncated`` are float tensors (1.0 or 0.0) kept apart: a target
    bootstraps unless the transition ``terminated``. Observations are in their storage dtype
    (``uint8`` images stay ``uint8``: the agent's encoder scales them), a dict of tensors for a
    ``Dict`` observation space.

    From a replay with ``n_step > 1``, ``rewards`` are each window's discounted sum, the next
    observation and flags are the window's last, and ``discounts`` holds ``gamma**k`` for a
    window of ``k`` transitions (None otherwise: bootstrap with ``gamma``). From a prioritized
    replay, ``weights`` are the importance-sampling weights and ``priorities`` takes the
    learner's ``|TD error|`` (:func:`~rltrain.agents.replay_terms.weighted` and
    :func:`~rltrain.agents.replay_terms.send_td_errors`); both None otherwise.
    """

    observations: ObsTensors
    actions: torch.Tensor
    rewards: torch.Tensor
    next_observations: ObsTensors
    terminated: torch.Tensor
    truncated: torch.Tensor
    discounts: torch.Tensor | None = None
    weights: torch.Tensor | None = None
    priorities: PriorityFeedback | None = None


#: The fields of a :class:`ReplayBatch` a replay stores (the others are computed when
#: sampling).
STORED_FIELDS = ReplayBatch._fields[:6]


class SampledReplay:
    """What a replay of transitions shares: draws from its own generator (``rng``), one batch
    at a time (:meth:`sample`) or a training round's at once (:meth:`prefetch`), the sampler
    state a failed gradient step puts back, n-step windows (``n_step``) and prioritized draws
    (``prioritized``). A subclass stores the transitions under flat indices (sub-env ``i %
    num_envs`` wrote transition ``i``): it keeps ``size``, ``capacity`` and ``next_row`` (the
    flat index of the next write), gathers rows (:meth:`_rows`), reports what it wrote
    (:meth:`_added`) and may refuse indices it can no longer rebuild (:meth:`_kept`).
    """

    size: int
    capacity: int
    num_envs: int
    rng: np.random.Generator
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    _plan: Plan | None

    def _sampling(self, *, num_envs: int, n_step: int, gamma: float,
                  priority: PriorityConfig | None) -> None:
        """Set how the replay samples (the constructor's arguments of the same names)."""
        if n_step < 1:
            raise ValueError(f"n_step must be >= 1 transition; got {n_step}.")
        self.num_envs, self.n_step, self.gamma = num_envs, n_step, gamma
        self.prioritized = None if priority is None else Prioritized(self.capacity, priority)

    @property
    def next_row(self) -> int:
        """The flat index the next :meth:`add` writes its first row to."""
        raise NotImplementedError

    def __len__(self) -> int:
        return self.size

    def can_sample(self) -> bool:
        """True once the buffer holds a transition."""
        return self.size > 0

    def sample(self, batch_size: int) -> ReplayBatch:
        """``batch_size`` transitions drawn with replacement, uniformly or in proportion to
        their priorities (the next prefetched batch, when :meth:`prefetch` drew some of this
        size)."""
        plan = self._plan
        if (plan is not None and plan.sampled < len(plan.indices)
                and plan.indices.shape[1] == batch_size):
            row = plan.sampled
            plan.sampled += 1
            rows = slice(row * batch_size, (row + 1) * batch_size)

            def part(tensor: Any) -> Any:
                return tensor if tensor is None else map_obs(lambda t: t[rows], tensor)

            return ReplayBatch(*(part(value) for value in plan.rows))
        if self.size == 0:
            raise ValueError(f"Cannot sample from an empty {type(self).__name__}; add "
                             "transitions first.")
        idx = self._draw((batch_size,))
        batch = self._gather(idx)
        if self.prioritized is None:
            return batch
        weights = self.prioritized.weights(idx, self.size)
        return batch._replace(weights=self._to_device(weights),
                              priorities=PriorityFeedback(self.prioritized, idx))

    def prefetch(self, batches: int, batch_size: int) -> None:
        """Draw the next ``batches`` batches of ``batch_size`` now, for the next ``batches``
        calls of ``sample(batch_size)`` (until the next ``add``, which drops the rest).

        One draw and one gather per field for them all, much cheaper per batch on a CPU than a
        draw and gathers for each (``docs/benchmarks.md``, "Figures behind implementation
        choices"). The batches are saved with the buffer, so a run resumed part-way through
        them samples the same ones. A prioritized replay draws each batch when it is sampled
        (from the priorities the previous step set), so it prefetches nothing.
        """
        if batches < 1 or self.size == 0 or self.prioritized is not None:
            self._plan = None
            return
        indices = self._draw((batches, batch_size))
        self._plan = Plan(indices, self._gather(indices.reshape(-1)))

    def _draw(self, shape: tuple[int, ...]) -> np.ndarray:
        """Indices of stored transitions of ``shape``, uniform or prioritized; one that
        :meth:`_kept` refuses is drawn again (and never drawn by priority again)."""
        idx = self._draw_any(shape)
        while True:
            kept = self._kept(idx)
            if kept is None or kept.all():
                return idx
            lost = ~kept
            if self.prioritized is not None:
                self.prioritized.forget(idx[lost])
            idx[lost] = self._draw_any((int(lost.sum()),))

    def _draw_any(self, shape: tuple[int, ...]) -> np.ndarray:
        if self.prioritized is not None:
            return self.prioritized.draw(self.rng, shape)
        return self.rng.integers(0, self.size, size=shape)

    def _kept(self, idx: np.ndarray) -> np.ndarray | None:
        """Which ``idx`` can still be rebuilt; None: all (the default: a replay that never
        loses a stored transition)."""
        return None

    def _added(self, first: int, rows: int) -> None:
        """``rows`` transitions were written from the flat index ``first`` on, wrapping at
        ``capacity`` (a subclass's ``add``)."""
        self._plan = None  # drawn from the buffer as it was
        if self.prioritized is not None:  # the indices only where priorities need them
            self.prioritized.added((first + np.arange(rows)) % self.capacity)

    def _gather(self, idx: np.ndarray) -> ReplayBatch:
        """The transitions ``idx`` as a batch: 1-step, or their n-step windows."""
        if self.n_step == 1:
            return self._rows(idx, idx)
        newer = ((self.next_row - 1 - idx) % self.capacity) // self.num_envs
        window = n_step_window(idx, n_step=self.n_step, gamma=self.gamma,
                               rewards=self.rewards.reshape(-1),
                               terminated=self.terminated.reshape(-1),
                               truncated=self.truncated.reshape(-1), newer=newer,
                               num_envs=self.num_envs, capacity=self.capacity)
        batch = self._rows(idx, window.last)
        return batch._replace(rewards=self._to_device(torch.from_numpy(window.returns)),
                              discounts=self._to_device(torch.from_numpy(window.discounts)))

    def _rows(self, idx: np.ndarray, last: np.ndarray) -> ReplayBatch:
        """Observations and actions of the transitions ``idx``; next observations, rewards and
        flags of the transitions ``last`` (the same for 1-step transitions)."""
        raise NotImplementedError

    def _to_device(self, tensor: torch.Tensor) -> torch.Tensor:
        device: torch.device = getattr(self, "device", torch.device("cpu"))
        return tensor if device.type == "cpu" else tensor.to(device, non_blocking=True)

    @property
    def sampler_state(self) -> tuple[Any, int]:
        """The sampling generator's state and how many prefetched batches were sampled:
        what a failed gradient step puts back (:attr:`sampler_state` assigned)."""
        return self.rng.bit_generator.state, 0 if self._plan is None else self._plan.sampled

    @sampler_state.setter
    def sampler_state(self, state: tuple[Any, int]) -> None:
        self.rng.bit_generator.state, sampled = state
        if self._plan is not None:
            self._plan.sampled = sampled

    def _plan_state(self) -> dict[str, Any]:
        """The sampler's part of a state dict: the generator, the prefetched draws left and
        the priorities."""
        plan = self._plan
        left = None if plan is None else plan.indices[plan.sampled:]
        state = {"rng": self.rng.bit_generator.state,
                 "prefetched": torch.from_numpy(left.copy()) if left is not None and len(left)
                 else None}
        if self.prioritized is not None:
            state["priorities"] = self.prioritized.state_dict()
        return state

    def _load_plan(self, state: dict[str, Any]) -> None:
        """Restore :meth:`_plan_state`'s output (after the transitions)."""
        saved = state.get("priorities")
        if (saved is None) != (self.prioritized is None):
            raise ValueError(
                f"The saved {type(self).__name__} was {'not ' if saved is None else ''}"
                "prioritized and this one is" + (" " if saved is None else " not ") +
                "(strategy.prioritized); resume with the checkpoint's settings.")
        if self.prioritized is not None and saved is not None:
            self.prioritized.load_state_dict(saved)
        self.rng.bit_generator.state = state["rng"]
        self._plan = None
        prefetched = state.get("prefetched")  # absent from checkpoints before prefetching
        if prefetched is not None:
            indices = _checked_indices(prefetched, self.size)
            self._plan = Plan(indices, self._gather(indices.reshape(-1)))


@dataclass
class Plan:
    """Prefetched batches: their indices, their gathered rows, how many were sampled."""

    indices: np.ndarray
    rows: ReplayBatch
    sampled: int = 0


def _checked_indices(saved: Any, size: int) -> np.ndarray:
    """Saved prefetched indices, refused unless they are a non-empty ``[batches,
    batch_size]`` integer tensor within the ``size`` stored transitions (an altered file)."""
    if (not isinstance(saved, torch.Tensor) or saved.dim() != 2 or saved.numel() == 0
            or saved.dtype != torch.int64
            or int(saved.min()) < 0 or int(saved.max()) >= size):
        found = (f"{saved.dtype} {tuple(saved.shape)}" if isinstance(saved, torch.Tensor)
                 else type(saved).__name__)
        raise ValueError(f"The saved ReplayBuffer's prefetched indices ({found}) are not "
                         f"batches of indices below its {size:,} transitions; the checkpoint "
                         "was altered.")
    indices: np.ndarray = saved.numpy().copy()
    return indices


