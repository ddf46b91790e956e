"""On-policy storage: one rollout of ``n_steps`` vector steps, time-major, and its minibatches."""

from __future__ import annotations

from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
import torch

from rltrain.buffers.observations import (
    GeneratorSampler,
    map_obs,
    mismatch,
    obs_nbytes,
    row_nbytes,
    torch_zeros,
)
from rltrain.buffers.replay import check_fits
from rltrain.runtime.statistics import Statistics
from rltrain.types import ObsTensors, Transitions

#: What an on-policy policy must return beside its actions (``PolicyStep.info``).
POLICY_OUTPUTS = ("log_prob", "value")

_TENSORS = ("observations", "actions", "log_probs", "values", "rewards", "terminated",
            "truncated", "final_observations", "last_observations", "advantages", "returns",
            "running_returns")
#: The tensors :meth:`RolloutBuffer.add` writes one row of per vector step.
_ADDED = ("observations", "actions", "log_probs", "values", "rewards", "terminated",
          "truncated")
#: The tensors of one row per vector step: a checkpoint holds the rows stored so far only.
_STEPS = (*_ADDED, "advantages", "returns")


class RolloutBatch(NamedTuple):
    """A minibatch of a rollout, flattened over time and sub-envs (``[B, ...]``); observations
    in their storage dtype (a dict of tensors for a ``Dict`` space)."""

    observations: ObsTensors
    actions: torch.Tensor
    log_probs: torch.Tensor
    values: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    #: With several processes: the count, sum and sum of squares of this minibatch's
    #: advantages over every rank's part of it (float64 ``[3]``), for a normalisation of the
    #: whole minibatch; None with one process.
    advantage_moments: torch.Tensor | None = None


class RolloutBuffer(GeneratorSampler):
    """The transitions of ``n_steps`` vector steps, as the policy collected them.

    Time-major tensors ``[n_steps, num_envs, ...]``: observations, the actions the policy
    sampled (``policy_info["raw_action"]`` where the policy sent a clipped one), its
    log-probabilities and values, rewards, ``terminated`` and ``truncated`` apart, and the true
    final observation of each truncated episode (``final_observations``, zero elsewhere) so the
    agent can bootstrap from it. ``last_observations`` are the observations after the last step
    (the bootstrap of unfinished episodes). The agent fills ``advantages`` and ``returns``
    (``LearningAgent.prepare_rollout``); the strategy then draws ``epochs`` permutations
    (:meth:`shuffle`) and reads minibatches by index (:meth:`minibatch`), so a run stopped in the
    middle of an update resumes at the same minibatch. ``running_returns`` (per sub-env) is kept
    across rollouts for agents that scale rewards by the spread of the discounted return.
    Observations are stored in their space's dtype (``uint8`` images as ``uint8``), one tensor
    per key for a ``Dict`` space.

    Args:
        n_steps: Vector steps per rollout.
        num_envs: Sub-environments.
        observation_space: A sub-env's observation space.
        action_space: A sub-env's action space.
        seed: Seed of the shuffling generator. Default 0.
        device: Where minibatches go. Default CPU.
    """

    def __init__(self, n_steps: int, *, num_envs: int, observation_space: gym.Space[Any],
                 action_space: gym.Space[Any], seed: int = 0,
                 device: torch.device | str = "cpu") -> None:
        if n_steps < 1 or num_envs < 1:
            raise ValueError(f"A rollout needs n_steps >= 1 and num_envs >= 1; got {n_steps} "
                             f"and {num_envs}.")
        self.n_steps, self.num_envs = n_steps, num_envs
        self.device = torch.device(device)
        act_shape = action_space.shape or ()
        act_dtype = torch.int64 if isinstance(action_space, gym.spaces.Discrete) else torch.float32
        shape = (n_steps, num_envs)
        check_fits(n_steps * num_envs * (2 * row_nbytes(observation_space)
                                         + 4 * int(np.prod(act_shape)) + 40),
                   f"A rollout of {n_steps:,} x {num_envs} transitions",
                   "Lower n_steps or num_envs.")
        self.observations = torch_zeros(observation_space, shape)
        self.final_observations = torch_zeros(observation_space, shape)
        self.last_observations = torch_zeros(observation_space, (num_envs,))
        self.actions = torch.zeros((*shape, *act_shape), dtype=act_dtype)
        self.log_probs, self.values, self.rewards = (torch.zeros(shape) for _ in range(3))
        self.advantages, self.returns = torch.zeros(shape), torch.zeros(shape)
        self.terminated = torch.zeros(shape, dtype=torch.bool)
        self.truncated = torch.zeros(shape, dtype=torch.bool)
        self.running_returns = torch.zeros(num_envs, dtype=torch.float64)
        self.pos = 0
        #: True once the agent prepared this rollout and the strategy shuffled it.
        self.prepared = False
        self.permutations = torch.zeros((0, n_steps * num_envs), dtype=torch.int64)
        #: :meth:`share_advantage_moments`' result, one row per minibatch of the update.
        self.advantage_moments = torch.zeros((0, 3), dtype=torch.float64)
        self.rng = np.random.default_rng(seed)
        #: NumPy views of the per-step storage that :meth:`add` writes through (made once:
        #: the tensors are only ever written in place, loading included).
        self._views: dict[str, Any] = {
            name: map_obs(torch.Tensor.numpy, getattr(self, name))
            for name in (*_ADDED, "final_observations", "last_observations")}

    @property
    def num_transitions(self) -> int:
        """Transitions in a full rollout: ``n_steps * num_envs``."""
        return self.n_steps * self.num_envs

    @property
    def full(self) -> bool:
        """True once ``n_steps`` vector steps are stored."""
        return self.pos == self.n_steps

    def __len__(self) -> int:
        return self.pos * self.num_envs

    @property
    def nbytes(self) -> int:
        """Bytes of storage."""
        return sum(obs_nbytes(getattr(self, name)) for name in _TENSORS)

    def can_sample(self) -> bool:
        """True once the rollout is prepared: its minibatches can be read."""
        return self.prepared

    def add(self, transitions: Transitions) -> None:
        """Store one vector step; the policy's ``log_prob`` and ``value`` come from
        ``transitions.policy_info``."""
        if self.full:
            raise ValueError(f"The rollout already holds its {self.n_steps} steps; train on it "
                             "and reset() it first.")
        info = transitions.policy_info
        missing = [name for name in POLICY_OUTPUTS if name not in info]
        if missing:
            raise ValueError(
                f"An on-policy rollout needs the policy's {' and '.join(missing)} for each "
                "action (PolicyStep.info); this policy returned "
                f"{sorted(info) or 'nothing'}. On-policy agents (PPO) return them.")
        # Written through NumPy views of the (CPU) storage: one NumPy assignment costs a
        # fraction of a tensor's indexed copy, and the values (cast to the storage's dtype)
        # are the same.
        t, views = self.pos, self._views
        for part, value in _parts(views["observations"], transitions.observations):
            part[t] = _array(value)
        views["actions"][t] = _array(info.get("raw_action", transitions.actions)).reshape(
            self.actions.shape[1:])
        views["log_probs"][t] = _array(info["log_prob"]).reshape(self.num_envs)
        views["values"][t] = _array(info["value"]).reshape(self.num_envs)
        views["rewards"][t] = _array(transitions.rewards)
        views["terminated"][t] = _array(transitions.terminated)
        views["truncated"][t] = truncated = _array(transitions.truncated)
        for final, last, value in _parts(views["final_observations"], views["last_observations"],
                                         map_obs(_array, transitions.next_observations)):
            row = final[t]
            row[...] = 0
            if truncated.any():  # rare: most steps end no episode by a time limit
                row[truncated] = value[truncated]
            last[...] = value
        self.pos += 1

    def check_batch_size(self, batch_size: int) -> None:
        """Refuse a minibatch size this rollout cannot be split into (the on-policy strategy's
        ``check``, before the run starts). Default: any (``OnPolicyConfig`` checks that it
        divides the rollout)."""

    def shuffle(self, epochs: int) -> None:
        """Draw one permutation of the rollout's transitions per epoch; the rollout is then
        ready for :meth:`minibatch`."""
        self.permutations = torch.from_numpy(np.stack(
            [self.rng.permutation(self.num_transitions) for _ in range(epochs)]))
        self.prepared = True

    def share_advantage_moments(self, batch_size: int, statistics: Statistics) -> None:
        """Every minibatch's advantage moments over every rank's part of it, for the whole
        update (after :meth:`shuffle`; :meth:`Statistics.minibatch_moments
        <rltrain.runtime.statistics.Statistics.minibatch_moments>`): none with one process,
        where each minibatch is normalised with its own."""
        rows = self.permutations.reshape(-1, batch_size)  # [epochs x minibatches, batch_size]
        moments = statistics.minibatch_moments(self.advantages, rows)
        if moments is not None:
            self.advantage_moments = moments

    def minibatch(self, index: int, batch_size: int) -> RolloutBatch:
        """Minibatch ``index`` of the update: epoch ``index // per_epoch``, the
        ``index % per_epoch``-th slice of ``batch_size`` transitions of its permutation (each
        epoch covers every transition once when ``batch_size`` divides the rollout)."""
        per_epoch = self.num_transitions // batch_size
        epoch, slot = divmod(index, per_epoch)
        rows = self.permutations[epoch, slot * batch_size:(slot + 1) * batch_size]
        device = self.device

        def take(t: torch.Tensor) -> torch.Tensor:
            taken = t.reshape(self.num_transitions, *t.shape[2:])[rows]
            return taken if device.type == "cpu" else taken.to(device, non_blocking=True)

        moments = self.advantage_moments[index] if len(self.advantage_moments) else None
        return RolloutBatch(map_obs(take, self.observations), take(self.actions),
                            take(self.log_probs), take(self.values), take(self.advantages),
                            take(self.returns), moments)


    def reset(self) -> None:
        """Empty the rollout for the next one (``running_returns`` carry over)."""
        self.pos = 0
        self.prepared = False
        self.permutations = self.permutations[:0]
        self.advantage_moments = self.advantage_moments[:0]

    def state_dict(self) -> dict[str, Any]:
        """What a resumed run reads of the rollout: the ``rows`` stored so far (the rest is
        written again before it is read), the final observations of the truncated episodes
        among them (``final_index``: their flat ``step x num_envs + env``), the last
        observations, the running returns, the position, the update's permutations and the
        shuffler's state."""
        rows = self.pos
        state: dict[str, Any] = {name: map_obs(lambda t: t[:rows].clone(), getattr(self, name))
                                 for name in _STEPS}
        final = torch.nonzero(self.truncated[:rows].reshape(-1)).reshape(-1)
        state.update(rows=rows, final_index=final, final_observations=map_obs(
            lambda t: t.reshape(-1, *t.shape[2:])[final].clone(), self.final_observations),
            last_observations=map_obs(torch.Tensor.clone, self.last_observations),
            running_returns=self.running_returns.clone())
        state.update(pos=self.pos, prepared=self.prepared,
                     permutations=self.permutations.clone(),
                     advantage_moments=self.advantage_moments.clone(), n_steps=self.n_steps,
                     num_envs=self.num_envs, rng=self.rng.bit_generator.state)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output into a rollout of the same size and spaces (a
        checkpoint's every tensor whole, as earlier versions wrote it, too)."""
        if (state["n_steps"], state["num_envs"]) != (self.n_steps, self.num_envs):
            raise ValueError(
                f"The saved rollout holds {state['n_steps']} steps of {state['num_envs']} envs; "
                f"this one {self.n_steps} of {self.num_envs}. Resume with the saved n_steps "
                "and num_envs.")
        whole = _whole(state, self.truncated.shape, self.final_observations)
        for name in _TENSORS:  # check every tensor (shape, dtype) before overwriting any
            found = mismatch(whole[name], getattr(self, name))
            if found is not None:
                raise ValueError(f"The saved rollout's {name}{found[0]} do not fit this rollout "
                                 f"({found[2]}). Was it made for another environment?")
        pos, permutations = int(state["pos"]), state["permutations"]
        if not 0 <= pos <= self.n_steps:
            raise ValueError(f"The saved rollout's position {pos} is outside 0..{self.n_steps}.")
        prepared = bool(state["prepared"])
        if not (isinstance(permutations, torch.Tensor) and permutations.dim() == 2
                and permutations.shape[1] == self.num_transitions
                and (permutations.shape[0] >= 1) == prepared
                and torch.equal(permutations.sort(dim=1).values,
                                torch.arange(self.num_transitions).expand_as(permutations))):
            raise ValueError("The saved rollout's minibatch order is not one permutation of "
                             f"its {self.num_transitions:,} transitions per epoch (one at least "
                             "when prepared).")
        rng = np.random.default_rng()
        try:
            rng.bit_generator.state = state["rng"]
        except (TypeError, ValueError, KeyError, OverflowError) as error:
            raise ValueError(f"The saved rollout's shuffling generator is not valid: {error}."
                             ) from None
        for name in _TENSORS:
            for mine, saved in _parts(getattr(self, name), whole[name]):
                mine.copy_(saved)
        self.pos, self.prepared = pos, prepared
        self.permutations = permutations.to(torch.int64).clone()
        moments = state.get("advantage_moments", torch.zeros((0, 3), dtype=torch.float64))
        if not (isinstance(moments, torch.Tensor) and moments.dim() == 2
                and moments.shape[1] == 3 and moments.dtype == torch.float64):
            raise ValueError("The saved rollout's advantage_moments are not a [minibatches, 3] "
                             "float64 tensor.")
        self.advantage_moments = moments.clone()
        self.rng = rng


def _whole(state: dict[str, Any], shape: torch.Size, like: ObsTensors) -> dict[str, Any]:
    """A saved rollout's tensors at full size: the ``rows`` stored, zeros after them, and the
    final observations put back at their ``final_index`` (a state without ``rows`` holds every
    tensor whole already). Raises ``ValueError`` for rows or indices that do not fit."""
    if "rows" not in state:
        return state
    rows, index = state["rows"], state["final_index"]
    steps, envs = shape
    if not (isinstance(rows, int) and 0 <= rows <= steps and isinstance(index, torch.Tensor)
            and index.dtype == torch.int64 and index.dim() == 1
            and bool(((index >= 0) & (index < rows * envs)).all())):
        raise ValueError(f"The saved rollout's rows ({rows!r}) or final-observation indices "
                         f"do not fit its {steps} steps of {envs} envs.")
    whole = dict(state)
    for name in _STEPS:
        whole[name] = map_obs(lambda t: _padded(t, steps), state[name])

    def scattered(saved: Any, mine: torch.Tensor) -> Any:
        if not isinstance(saved, torch.Tensor) or saved.shape[:1] != index.shape:
            return saved  # refused by the shape check that follows
        out = torch.zeros((steps * envs, *saved.shape[1:]), dtype=saved.dtype)
        out[index] = saved
        return out.reshape(steps, envs, *saved.shape[1:])

    saved = state["final_observations"]
    whole["final_observations"] = ({key: scattered(saved.get(key), value)
                                    for key, value in like.items()}
                                   if isinstance(like, dict) and isinstance(saved, dict)
                                   else scattered(saved, like))  # type: ignore[arg-type]
    return whole


def _padded(saved: Any, steps: int) -> Any:
    """``saved`` rows followed by zero rows up to ``steps`` (as it is when it is no tensor)."""
    if not isinstance(saved, torch.Tensor) or saved.dim() == 0 or len(saved) > steps:
        return saved
    return torch.cat([saved, saved.new_zeros((steps - len(saved), *saved.shape[1:]))])


def _array(value: Any) -> np.ndarray:
    """``value`` (an array, a tensor on any device, a number) as a NumPy array, without a copy
    where it can (bfloat16, which NumPy lacks, as float32)."""
    if not isinstance(value, torch.Tensor):
        return np.asarray(value)
    value = value.detach().cpu()
    array: np.ndarray = (value.float() if value.dtype == torch.bfloat16 else value).numpy()
    return array


def _parts(*trees: Any) -> list[tuple[Any, ...]]:
    """The tensors of same-keyed observations side by side: one tuple, or one per key."""
    if isinstance(trees[0], dict):
        return [tuple(tree[key] for tree in trees) for key in trees[0]]
    return [trees]
