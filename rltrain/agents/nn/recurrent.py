"""Recurrent actor-critic: an LSTM or GRU between the observation encoder and PPO's trunks
(CleanRL's ``ppo_atari_lstm.py``; sb3-contrib's RecurrentPPO with one shared recurrent layer).

The recurrent state of a batch of sub-envs is one tensor ``[envs, S]`` (an LSTM's ``h`` and
``c`` side by side, ``S = 2 x hidden``; a GRU's ``h``, ``S = hidden``): the policy carries it
from step to step, the runner resets a row to zeros when its episode ends and saves it with the
run, and a rollout keeps the state it started from, so training re-runs each sub-env's sequence
from it with the same resets.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from rltrain.agents.nn.actor_critic import ActorCritic
from rltrain.agents.nn.distributions import ActionDistribution, ActionHead
from rltrain.agents.nn.encoders import Encoder, FlatEncoder
from rltrain.agents.nn.masking import action_mask
from rltrain.buffers.observations import map_obs
from rltrain.buffers.recurrent import RecurrentRollout
from rltrain.types import ObsTensors

#: The recurrent layers by name (``PPOConfig.recurrent``).
RECURRENT = ("lstm", "gru")


class RecurrentCore(nn.Module):
    """One LSTM or GRU layer stepped one observation at a time.

    Args:
        kind: ``"lstm"`` or ``"gru"``.
        in_features: Features per observation (the encoder's).
        hidden: Units of the layer.
    """

    def __init__(self, kind: str, in_features: int, hidden: int) -> None:
        super().__init__()
        self.kind, self.hidden = kind, hidden
        self.rnn: nn.LSTM | nn.GRU = (nn.LSTM if kind == "lstm" else nn.GRU)(in_features, hidden)
        for name, param in self.rnn.named_parameters():  # CleanRL's: orthogonal, zero biases
            if "weight" in name:
                nn.init.orthogonal_(param, 1.0)
            else:
                nn.init.zeros_(param)

    @property
    def state_size(self) -> int:
        """Width of the state tensor: ``2 x hidden`` for an LSTM (``h``, ``c``), else
        ``hidden``."""
        return 2 * self.hidden if self.kind == "lstm" else self.hidden

    def step(self, x: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One step: features ``[B, F]`` and state ``[B, S]`` to outputs ``[B, hidden]`` and
        the next state."""
        if isinstance(self.rnn, nn.LSTM):
            h, c = state[None, :, :self.hidden], state[None, :, self.hidden:]
            out, (h, c) = self.rnn(x[None], (h.contiguous(), c.contiguous()))
            return out[0], torch.cat([h[0], c[0]], dim=-1)
        out, h = self.rnn(x[None], state[None].contiguous())
        return out[0], h[0]

    def outputs(self, x: torch.Tensor, state: torch.Tensor, starts: torch.Tensor
                ) -> torch.Tensor:
        """The outputs ``[T, B, hidden]`` of :meth:`sequence`, from one call of the layer: each
        sub-env's steps are cut where an episode starts into segments, which run side by side
        as one batch (a segment that begins an episode from zeros, each sub-env's first from
        its row of ``state``), padded after their ends to the longest (padding no output
        reads), as sb3-contrib's RecurrentPPO runs them. Equal to :meth:`sequence`'s outputs
        up to float rounding, without a layer call per step."""
        steps, batch = starts.shape
        time = torch.arange(steps, device=x.device)[:, None].expand(steps, batch)
        cuts = starts.clone()
        cuts[0] = True  # each sub-env's first step begins its first segment
        begun = torch.where(cuts, time, 0).cummax(dim=0).values  # its segment's first step
        position = time - begun
        per_env = cuts.sum(dim=0)
        first = per_env.cumsum(0) - per_env  # each sub-env's first segment
        segment = first[None, :] + cuts.cumsum(dim=0) - 1
        padded = x.new_zeros(int(position.max()) + 1, int(per_env.sum()), x.shape[-1])
        padded[position, segment] = x
        initial = state.new_zeros(padded.shape[1], state.shape[-1])
        initial[first] = state * (~starts[0]).to(state.dtype)[:, None]
        if isinstance(self.rnn, nn.LSTM):
            h, c = initial[None, :, :self.hidden], initial[None, :, self.hidden:]
            out, _ = self.rnn(padded, (h.contiguous(), c.contiguous()))
        else:
            out, _ = self.rnn(padded, initial[None].contiguous())
        return out[position, segment]  # type: ignore[no-any-return]

    def sequence(self, x: torch.Tensor, state: torch.Tensor, starts: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        """Steps over ``T``: features ``[T, B, F]`` from ``state`` ``[B, S]``, the state reset
        to zeros where ``starts`` (``[T, B]``) begins an episode; returns the outputs ``[T, B,
        hidden]`` and the state after each step ``[T, B, S]``."""
        outputs, states = [], []
        for t in range(x.shape[0]):
            state = state * (~starts[t]).to(state.dtype)[:, None]
            out, state = self.step(x[t], state)
            outputs.append(out)
            states.append(state)
        return torch.stack(outputs), torch.stack(states)


class RecurrentActorCritic(ActorCritic):
    """``π(·|s, h)`` and ``V(s, h)``: the observation encoder, a :class:`RecurrentCore`, then
    :class:`~rltrain.agents.nn.actor_critic.ActorCritic`'s trunks and heads over its outputs.

    Args:
        encoder: The observation encoder.
        head: The action head.
        kind: ``"lstm"`` or ``"gru"``.
        hidden: Units of the recurrent layer.
        hidden_sizes, activation, shared_trunk, ortho_init: ActorCritic's, over the recurrent
            outputs.
    """

    def __init__(self, encoder: Encoder, head: ActionHead, kind: str, hidden: int,
                 hidden_sizes: list[int], activation: str, shared_trunk: bool, *,
                 ortho_init: bool = True) -> None:
        super().__init__(FlatEncoder((hidden,)), head, hidden_sizes, activation, shared_trunk,
                         ortho_init=ortho_init)
        self.obs_encoder = encoder
        self.core = RecurrentCore(kind, encoder.out_features, hidden)

    def step(self, obs: ObsTensors, state: torch.Tensor
             ) -> tuple[ActionDistribution, torch.Tensor, torch.Tensor]:
        """One step of a batch of sub-envs: the distribution, the value and the next state."""
        out, state = self.core.step(self.obs_encoder(obs), state)
        dist, value = self.from_features(out, action_mask(obs))
        return dist, value, state

    def sequences(self, obs: ObsTensors, starts: torch.Tensor, state: torch.Tensor
                  ) -> tuple[ActionDistribution, torch.Tensor]:
        """Whole sequences: observations flattened time-major (``[T x B, ...]``), episode
        starts ``[T, B]`` and the state each sequence began from ``[B, S]``; the distribution
        and values of every row, in the same order."""
        steps, batch = starts.shape
        features = self.obs_encoder(obs).reshape(steps, batch, -1)
        out = self.core.outputs(features, state, starts)
        return self.from_features(out.reshape(steps * batch, -1), action_mask(obs))

    def states_after(self, obs: ObsTensors, starts: torch.Tensor, state: torch.Tensor
                     ) -> torch.Tensor:
        """The state after each step of sequences (as :meth:`sequences` takes them), ``[T, B,
        S]``."""
        steps, batch = starts.shape
        features = self.obs_encoder(obs).reshape(steps, batch, -1)
        return self.core.sequence(features, state, starts)[1]

    def values_from(self, obs: ObsTensors, state: torch.Tensor) -> torch.Tensor:
        """``V`` of one observation per row after ``state`` (a bootstrap), ``[B]``."""
        out, _ = self.core.step(self.obs_encoder(obs), state)
        return self.from_features(out)[1]


def flat_time_major(obs: ObsTensors) -> ObsTensors:
    """``[T, B, ...]`` observations as ``[T x B, ...]``."""
    return map_obs(lambda t: t.reshape(t.shape[0] * t.shape[1], *t.shape[2:]), obs)


def recurrent_next_values(net: RecurrentActorCritic, rollout: RecurrentRollout,
                          seen: Callable[[ObsTensors], ObsTensors],
                          values: torch.Tensor) -> torch.Tensor:
    """``V`` of the state each step of a recurrent rollout reached (GAE's ``v'_t``): the next
    step's recorded value inside an episode; after the last step, the last observation's value
    from the state the sequence ended in (reset where the last step ended its episode); at a
    time limit, the true final observation's value from the state after that step. The
    sequences are re-run from the rollout's initial state (``seen``: observations as the
    networks see them)."""
    steps, envs = rollout.n_steps, rollout.num_envs
    device = values.device
    obs = seen(map_obs(lambda t: t.to(device), flat_time_major(rollout.observations)))
    starts = rollout.episode_starts().to(device)
    states = net.states_after(obs, starts, rollout.initial_state.to(device))
    ended = (rollout.terminated | rollout.truncated)[-1].to(device)
    last = states[-1] * (~ended).to(states.dtype)[:, None]
    last_obs = seen(map_obs(lambda t: t.to(device), rollout.last_observations))
    next_values = torch.cat([values[1:], net.values_from(last_obs, last)[None]])
    truncated = rollout.truncated.to(device)
    if truncated.any():  # bootstrap a time limit from the true final observation
        rows = truncated.cpu()
        final = seen(map_obs(lambda t: t[rows].to(device), rollout.final_observations))
        next_values[truncated] = net.values_from(final, states[truncated])
    assert next_values.shape == (steps, envs)
    return next_values
