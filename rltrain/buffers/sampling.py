"""How a replay of transitions turns stored 1-step transitions into training targets' inputs:
n-step returns computed when sampling (:func:`n_step_window`), and proportional prioritized
sampling over a sum tree (:class:`Prioritized`, Schaul et al. 2016, arXiv:1511.05952).

Both read the replay's flat transition index ``i``: sub-env ``i % num_envs`` wrote it, and that
sub-env's next transition is ``(i + num_envs) % capacity`` (each ``add`` writes one row per
sub-env, in order). Nothing here is saved apart from the replay's own state: an n-step window is
recomputed from the stored transitions at every draw, so a resumed run samples the same windows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from rltrain.settings.replay import PriorityConfig


@dataclass(frozen=True)
class NStepWindow:
    """Where each sampled transition's n-step window ends.

    Attributes:
        last: The flat index of the window's last transition (its next observation, terminated
            and truncated flags are the n-step transition's).
        returns: ``sum_j gamma**j * r_{t+j}`` over the window, float32.
        discounts: ``gamma**k`` for a window of ``k`` transitions: the factor of the
            bootstrapped value, float32.
    """

    last: np.ndarray
    returns: np.ndarray
    discounts: np.ndarray


def n_step_window(idx: np.ndarray, *, n_step: int, gamma: float, rewards: np.ndarray,
                  terminated: np.ndarray, truncated: np.ndarray, newer: np.ndarray,
                  num_envs: int, capacity: int) -> NStepWindow:
    """The n-step windows starting at the transitions ``idx`` (flat indices).

    A window grows one transition of the same sub-env at a time, up to ``n_step``, and stops
    after a transition that ended its episode (terminated or truncated: a truncated window
    bootstraps from the true final observation the runner stored, a terminated one does not)
    and at the newest transition stored (a shorter window, bootstrapped from its last next
    observation: still an unbiased n-step target for ``k`` steps).

    Args:
        idx: Flat transition indices, any shape.
        n_step: Most transitions in a window (>= 1).
        gamma: The agent's discount factor.
        rewards: Stored rewards, flat (``[capacity]``).
        terminated: Stored terminated flags (1.0 or 0.0), flat.
        truncated: Stored truncated flags, flat.
        newer: For each ``idx``, how many later transitions of its sub-env are stored.
        num_envs: Sub-envs writing one row each per add.
        capacity: Flat transitions the ring holds.
    """
    def ended(at: np.ndarray) -> np.ndarray:
        done: np.ndarray = (terminated[at] + truncated[at]) > 0
        return done

    last = idx.copy()
    returns = rewards[idx].astype(np.float32)
    steps = np.ones(idx.shape, dtype=np.int64)
    going = ~ended(idx) & (newer >= 1)
    for j in range(1, n_step):
        if not going.any():
            break
        last = np.where(going, (last + num_envs) % capacity, last)
        returns = returns + np.where(going, np.float32(gamma**j) * rewards[last], 0.0)
        steps += going
        going &= ~ended(last) & (newer > j)
    discounts = np.power(np.float32(gamma), steps).astype(np.float32)
    return NStepWindow(last, returns.astype(np.float32), discounts)


class SumTree:
    """A binary tree of non-negative leaf values whose nodes hold their subtree's sum: setting
    leaves and drawing a leaf with probability proportional to its value are ``O(log n)``,
    vectorised over many leaves at once. Parents are recomputed from their children (never
    adjusted by differences), so sums do not drift."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.depth = max(size - 1, 0).bit_length()
        self.leaves = 1 << self.depth
        self.nodes = np.zeros(2 * self.leaves, dtype=np.float64)

    @property
    def total(self) -> float:
        """The sum of every leaf."""
        return float(self.nodes[1])

    def values(self) -> np.ndarray:
        """The leaves' values (a view), ``[size]``."""
        return self.nodes[self.leaves:self.leaves + self.size]

    def set(self, idx: np.ndarray, values: np.ndarray) -> None:
        """Set the leaves ``idx`` to ``values`` and update their ancestors."""
        node = np.asarray(idx, dtype=np.int64) + self.leaves
        self.nodes[node] = values
        node = np.unique(node // 2)
        while node[0] >= 1:
            self.nodes[node] = self.nodes[2 * node] + self.nodes[2 * node + 1]
            if node[0] == 1:
                break
            node = np.unique(node // 2)

    def find(self, prefix: np.ndarray) -> np.ndarray:
        """The leaves where the running sum of values passes ``prefix`` (each in ``[0,
        total)``): leaf ``i`` is found with probability ``value_i / total``. A leaf of value 0
        is never returned while the tree holds a positive one."""
        node = np.ones(prefix.shape, dtype=np.int64)
        prefix = prefix.copy()
        for _ in range(self.depth):
            left = 2 * node
            left_sum = self.nodes[left]
            right = (prefix >= left_sum) & (self.nodes[left + 1] > 0) | (left_sum <= 0)
            prefix = np.where(right, prefix - left_sum, prefix)
            node = left + right
        return node - self.leaves


class Prioritized:
    """Proportional prioritized sampling for a replay of ``capacity`` flat transitions: new
    transitions get the highest priority seen so far, a draw is stratified over ``batch``
    equal segments of the total priority, importance weights ``(N P(i))**-beta`` are
    normalised by the batch's largest (as Dopamine's Rainbow), and priorities are set from the
    learner's ``|TD error| + epsilon`` raised to ``alpha``.

    Args:
        capacity: Flat transitions of the replay.
        config: :class:`PriorityConfig`.
    """

    def __init__(self, capacity: int, config: PriorityConfig) -> None:
        self.config = config
        self.tree = SumTree(capacity)
        self.max_priority = 1.0
        #: The importance-sampling exponent now; the strategy anneals it
        #: (:func:`beta_at`).
        self.beta = config.beta_start

    def added(self, idx: np.ndarray) -> None:
        """Transitions written at ``idx``: the highest priority so far, so each is drawn
        soon."""
        self.tree.set(idx, np.full(len(idx), self.max_priority))

    def draw(self, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        """Indices drawn in proportion to their priorities, stratified per batch row."""
        batch = shape[-1]
        total = self.tree.total
        if total <= 0:
            raise ValueError("Prioritized replay: every stored transition has priority 0.")
        segment = total / batch
        u = (np.arange(batch) + rng.random(shape)) * segment
        return self.tree.find(np.minimum(u, np.nextafter(total, 0)))

    def forget(self, idx: np.ndarray) -> None:
        """Transitions that can no longer be drawn (their frames left the ring)."""
        self.tree.set(idx, np.zeros(len(idx)))

    def weights(self, idx: np.ndarray, size: int) -> torch.Tensor:
        """Importance-sampling weights of the drawn ``idx`` among ``size`` stored, float32,
        the batch's largest 1."""
        probabilities = self.tree.values()[idx] / self.tree.total
        weights = (size * probabilities) ** -self.beta
        return torch.from_numpy((weights / weights.max()).astype(np.float32))

    def update(self, idx: np.ndarray, td_errors: torch.Tensor) -> None:
        """New priorities ``(|td| + epsilon)**alpha`` for ``idx``; a non-finite TD error (a
        failed step) leaves its transition's priority as it was."""
        errors = td_errors.detach().abs().float().cpu().numpy().reshape(-1)
        finite = np.isfinite(errors)
        if not finite.any():
            return
        priorities = (errors[finite] + self.config.epsilon) ** self.config.alpha
        self.tree.set(idx[finite], priorities)
        self.max_priority = max(self.max_priority, float(priorities.max()))

    def state_dict(self) -> dict[str, Any]:
        """The priorities of the ``size`` first transitions, and the highest so far."""
        return {"values": torch.from_numpy(self.tree.values().copy()),
                "max_priority": self.max_priority}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output; refused unless every priority is a finite,
        non-negative number and the count is the replay's."""
        values, highest = state.get("values"), state.get("max_priority")
        ok = (isinstance(values, torch.Tensor) and values.dtype == torch.float64
              and tuple(values.shape) == (self.tree.size,)
              and isinstance(highest, float) and np.isfinite(highest) and highest > 0)
        if ok:
            array = values.numpy()  # type: ignore[union-attr]
            ok = bool(np.isfinite(array).all() and (array >= 0).all())
        if not ok:
            raise ValueError("The saved replay's priorities are not finite non-negative numbers, "
                             "one per transition; the checkpoint was altered.")
        self.tree.set(np.arange(self.tree.size), values.numpy())  # type: ignore[union-attr]
        self.max_priority = float(highest)  # type: ignore[arg-type]


def beta_at(config: PriorityConfig, env_steps: int, num_steps: int) -> float:
    """The importance-sampling exponent after ``env_steps`` of ``num_steps``: ``beta_start``
    moved linearly to 1."""
    fraction = min(env_steps / num_steps, 1.0) if num_steps > 0 else 1.0
    return config.beta_start + (1.0 - config.beta_start) * fraction


@dataclass(frozen=True)
class PriorityFeedback:
    """What a learner sends back for a prioritized batch: its ``|TD error|`` per transition
    (:meth:`update`), which become the drawn transitions' new priorities."""

    sampler: Prioritized
    indices: np.ndarray

    def update(self, td_errors: torch.Tensor) -> None:
        """Set the batch's transitions' priorities from ``td_errors`` (``[batch]``)."""
        self.sampler.update(self.indices, td_errors)
