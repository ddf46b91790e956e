"""Returns and advantages along the time dimension: Dreamer's λ-returns and PPO's GAE(λ).

Both read time-major tensors (``[T, N]``: ``T`` steps of ``N`` sub-environments) and run one
backward recursion over ``T``.
"""

from __future__ import annotations

import torch


def lambda_returns(rewards: torch.Tensor, next_values: torch.Tensor, discounts: torch.Tensor,
                   lambda_: float) -> torch.Tensor:
    """λ-returns along the first (time) dimension (DreamerV1, Eq. 6):

        R_t = r_t + d_t ((1 - λ) v(s_{t+1}) + λ R_{t+1}),   R_H = v(s_H)

    where ``r_t`` and ``d_t`` are the reward and discount (γ times the continue probability)
    of step ``t`` (from ``s_t`` to ``s_{t+1}``), and ``next_values[t]`` is ``v(s_{t+1})`` (the
    last one bootstraps; no ``v(s_0)``, which no return reads). Shapes: ``[H, N]`` in,
    ``[H, N]`` out. Computed as ``R_t = [r_t + d_t (1 - λ) v(s_{t+1})] + (d_t λ) R_{t+1}``:
    the bracket and ``d_t λ`` for all steps at once, one multiply-add per step in the loop.
    """
    targets = (rewards + discounts * ((1.0 - lambda_) * next_values)).unbind(0)
    carries = (discounts * lambda_).unbind(0)
    last = next_values[-1]
    returns = []
    for t in reversed(range(len(targets))):
        last = torch.addcmul(targets[t], carries[t], last)
        returns.append(last)
    return torch.stack(returns[::-1], dim=0)


def gae(rewards: torch.Tensor, values: torch.Tensor, next_values: torch.Tensor,
        terminated: torch.Tensor, truncated: torch.Tensor, gamma: float,
        lambda_: float) -> torch.Tensor:
    """Generalized advantage estimates (Schulman et al. 2016, arXiv:1506.02438, Eq. 16):

        δ_t = r_t + γ (1 - terminated_t) v'_t - v(s_t)
        A_t = δ_t + γ λ (1 - done_t) A_{t+1},   A_T = 0

    ``next_values[t]`` (``v'_t``) is the value of the state step ``t`` reached: ``v(s_{t+1})``
    inside an episode, the value of the last observation at the rollout's end, and the value
    of the true final observation where a time limit cut the episode (``truncated_t``): a
    truncation is bootstrapped, not treated as a termination, and ``done_t`` (terminated or
    truncated) stops the recursion at every episode boundary. Shapes ``[T, N]``; the returns
    regressed by the critic are ``A + values``.
    """
    alive = 1.0 - terminated.float()
    carry = gamma * lambda_ * (1.0 - (terminated | truncated).float())
    deltas = rewards + gamma * alive * next_values - values
    advantages = torch.empty_like(deltas)
    last = torch.zeros_like(deltas[0])
    for t in reversed(range(deltas.shape[0])):
        last = deltas[t] + carry[t] * last
        advantages[t] = last
    return advantages
