"""The rollout of a recurrent policy: minibatches of whole sequences, one per sub-env, with the
recurrent state each sequence started from (CleanRL's ``ppo_atari_lstm.py``; sb3-contrib's
RecurrentPPO pads sequences split at episode starts instead)."""

from __future__ import annotations

from typing import Any, NamedTuple

import gymnasium as gym
import torch

from rltrain.buffers.observations import map_obs
from rltrain.buffers.rollout import RolloutBuffer
from rltrain.types import ObsTensors, Transitions

#: The policy's ``info`` key with the recurrent state each step started from (``[envs, S]``).
STATE_IN = "state_in"


class RecurrentBatch(NamedTuple):
    """A minibatch of whole sequences: ``E`` sub-envs' ``T`` steps, flattened time-major
    (row ``t * E + e``), as :class:`~rltrain.buffers.RolloutBatch`; ``episode_starts``
    (``[T, E]``, True where an observation begins an episode inside the sequence: the state is
    reset there) and ``initial_state`` (``[E, S]``: the state each sequence started from)."""

    observations: ObsTensors
    actions: torch.Tensor
    log_probs: torch.Tensor
    values: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    advantage_moments: torch.Tensor | None
    episode_starts: torch.Tensor
    initial_state: torch.Tensor


class RecurrentRollout(RolloutBuffer):
    """A :class:`~rltrain.buffers.RolloutBuffer` that also keeps the recurrent state the
    rollout started from (the policy's ``info["state_in"]`` at its first step) and whose
    minibatches are whole sub-env sequences in time order: each epoch's permutation orders the
    transitions sub-env by sub-env (a shuffled order of sub-envs), so that a minibatch of
    ``batch_size`` (a multiple of ``n_steps``) holds ``batch_size / n_steps`` whole sequences.

    Args:
        n_steps: Vector steps per rollout.
        num_envs: Sub-environments.
        observation_space: A sub-env's observation space.
        action_space: A sub-env's action space.
        state_size: Width of the recurrent state (``[num_envs, state_size]``).
        seed: Seed of the shuffling generator. Default 0.
        device: Where minibatches go. Default CPU.
    """

    def __init__(self, n_steps: int, *, num_envs: int, observation_space: gym.Space[Any],
                 action_space: gym.Space[Any], state_size: int, seed: int = 0,
                 device: torch.device | str = "cpu") -> None:
        super().__init__(n_steps, num_envs=num_envs, observation_space=observation_space,
                         action_space=action_space, seed=seed, device=device)
        self.initial_state = torch.zeros(num_envs, state_size)

    def check_batch_size(self, batch_size: int) -> None:
        """Refuse a minibatch that is not whole sequences, naming the sizes that are."""
        if batch_size % self.n_steps or self.num_transitions % batch_size:
            sizes = [k * self.n_steps for k in range(1, self.num_envs + 1)
                     if self.num_envs % k == 0]
            raise ValueError(
                f"A recurrent policy trains on whole sequences of n_steps ({self.n_steps}) "
                f"steps: strategy.batch_size ({batch_size}) must be n_steps x a divisor of "
                f"num_envs ({self.num_envs}), one of {sizes}.")

    def add(self, transitions: Transitions) -> None:
        if self.pos == 0:
            state = transitions.policy_info.get(STATE_IN)
            if not isinstance(state, torch.Tensor) or state.shape != self.initial_state.shape:
                raise ValueError(
                    f"A recurrent rollout needs the state each step started from, "
                    f"PolicyStep.info['{STATE_IN}'] of shape {tuple(self.initial_state.shape)};"
                    f" got {getattr(state, 'shape', state)}.")
            self.initial_state.copy_(state.detach().cpu())
        super().add(transitions)

    def shuffle(self, epochs: int) -> None:
        """One shuffled order of sub-envs per epoch, each sub-env's transitions in time
        order."""
        steps = torch.arange(self.n_steps) * self.num_envs
        orders = [torch.from_numpy(self.rng.permutation(self.num_envs)) for _ in range(epochs)]
        self.permutations = torch.stack([(order[:, None] + steps[None, :]).reshape(-1)
                                         for order in orders])
        self.prepared = True

    def minibatch(self, index: int, batch_size: int) -> RecurrentBatch:  # type: ignore[override]
        """Minibatch ``index`` of the update: its sub-envs' whole sequences."""
        flat = super().minibatch(index, batch_size)  # rows env-major: [E x T]
        n, t = batch_size // self.n_steps, self.n_steps

        def time_major(x: torch.Tensor) -> torch.Tensor:
            return x.reshape(n, t, *x.shape[1:]).transpose(0, 1).reshape(n * t, *x.shape[1:])

        per_epoch = self.num_transitions // batch_size
        epoch, slot = divmod(index, per_epoch)
        rows = self.permutations[epoch, slot * batch_size:(slot + 1) * batch_size]
        envs = rows[::t] % self.num_envs
        starts = self.episode_starts()[:, envs]
        device = self.device
        return RecurrentBatch(map_obs(time_major, flat.observations), time_major(flat.actions),
                              time_major(flat.log_probs), time_major(flat.values),
                              time_major(flat.advantages), time_major(flat.returns),
                              flat.advantage_moments, starts.to(device),
                              self.initial_state[envs].to(device))

    def episode_starts(self) -> torch.Tensor:
        """``[n_steps, num_envs]``: True where an observation begins an episode after the
        rollout's first step (the first step's state is the stored initial state)."""
        ended = self.terminated | self.truncated
        return torch.cat([torch.zeros(1, self.num_envs, dtype=torch.bool), ended[:-1]])

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["initial_state"] = self.initial_state.clone()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        saved = state.get("initial_state")
        if (not isinstance(saved, torch.Tensor) or saved.shape != self.initial_state.shape
                or saved.dtype != torch.float32 or not bool(torch.isfinite(saved).all())):
            raise ValueError(f"The saved recurrent rollout's initial_state is not a finite "
                             f"float32 tensor of shape {tuple(self.initial_state.shape)}; the "
                             "checkpoint was altered or made with another recurrent size.")
        super().load_state_dict(state)
        self.initial_state.copy_(saved)
