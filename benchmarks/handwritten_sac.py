"""A minimal hand-written SAC loop (CleanRL-style, one function): the baseline rltrain's SAC is
measured against.

Same algorithm and hyperparameters as rltrain's SAC with its default strategy settings and
``configs/sac_pendulum.yaml`` (Stable-Baselines3's SAC defaults, RL-Zoo's lr 1e-3 for
Pendulum-v1): a 256x256 ReLU actor whose log-std is bounded by a tanh into [-5, 2], two
256x256 ReLU critics (two separate networks, as CleanRL has them) with Polyak targets
(tau 0.005), the entropy term in the target, a learned temperature (log alpha by Adam, from
alpha 1, target entropy -|A|), batch 256, one gradient step per env step once the buffer holds
100 transitions, the first 100 env steps uniform random, a 1,000,000-transition buffer in
numpy, fused Adam (as ``rltrain.optim.adam`` on CPU) for the critics, the actor and the
temperature. The math is rltrain's: the log-probability is taken in the env's action units
(the tanh and the rescaling corrected, as CleanRL does), the critics see actions in [-1, 1],
the critic loss is the sum of both critics' mean squared errors, the temperature's loss reuses
the actor step's log-probabilities, and a truncated episode bootstraps from its true final
observation.

What is CleanRL's and not rltrain's: the two critics are two modules (rltrain stacks them into
one batched matrix product), and the actor's backward pass also fills the critics' gradients
(zeroed before the critics' next step), as CleanRL's ``actor_loss.backward()`` does.
"""

from __future__ import annotations

import copy
import math
import random
import time
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


class Actor(nn.Module):
    """``a = tanh(u)`` with ``u ~ N(mu(s), sigma(s))``, in [-1, 1]; the env gets
    ``a * scale + bias``."""

    def __init__(self, obs_dim: int, action_dim: int, hidden: tuple[int, ...]) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        size = obs_dim
        for width in hidden:
            layers += [nn.Linear(size, width), nn.ReLU()]
            size = width
        self.trunk = nn.Sequential(*layers)
        self.fc_mean = nn.Linear(size, action_dim)
        self.fc_logstd = nn.Linear(size, action_dim)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.trunk(obs)
        log_std = torch.tanh(self.fc_logstd(h))
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (log_std + 1)
        return self.fc_mean(h), log_std


def critic(in_features: int, hidden: tuple[int, ...]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for width in hidden:
        layers += [nn.Linear(in_features, width), nn.ReLU()]
        in_features = width
    return nn.Sequential(*layers, nn.Linear(in_features, 1))


def train(*, env_id: str = "Pendulum-v1", num_steps: int = 20_000, seed: int = 0,
          buffer_size: int = 1_000_000, batch_size: int = 256, warmup_steps: int = 100,
          lr: float = 1e-3, gamma: float = 0.99, tau: float = 0.005,
          hidden: tuple[int, ...] = (256, 256), fused_adam: bool = True,
          eval_interval: int | None = None, eval_episodes: int = 10) -> dict[str, Any]:
    """Train for ``num_steps`` env steps; returns env steps, gradient steps, seconds and the
    evaluations ``(env steps, seconds, mean greedy return)`` when ``eval_interval`` is set."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    envs = gym.make_vec(env_id, 1, vectorization_mode="sync",
                        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP})
    envs.action_space.seed(seed)
    space = envs.single_action_space
    assert isinstance(space, gym.spaces.Box)
    obs_dim = int(np.prod(envs.single_observation_space.shape or ()))
    action_dim = int(np.prod(space.shape))
    scale = torch.as_tensor((space.high - space.low) / 2, dtype=torch.float32)
    bias = torch.as_tensor((space.high + space.low) / 2, dtype=torch.float32)
    log_scale = float(scale.log().sum())

    actor = Actor(obs_dim, action_dim, hidden)
    qf1, qf2 = critic(obs_dim + action_dim, hidden), critic(obs_dim + action_dim, hidden)
    qf1_target = copy.deepcopy(qf1).requires_grad_(False)
    qf2_target = copy.deepcopy(qf2).requires_grad_(False)
    q_params = list(qf1.parameters()) + list(qf2.parameters())
    q_optimizer = torch.optim.Adam(q_params, lr=lr, fused=fused_adam)
    actor_optimizer = torch.optim.Adam(actor.parameters(), lr=lr, fused=fused_adam)
    target_entropy = -float(action_dim)
    log_alpha = torch.zeros(1, requires_grad=True)  # alpha starts at 1
    a_optimizer = torch.optim.Adam([log_alpha], lr=lr, fused=fused_adam)
    target_pairs = list(zip(list(qf1_target.parameters()) + list(qf2_target.parameters()),
                            q_params, strict=True))

    def sample(obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterised action in [-1, 1] and its log-probability in env units."""
        mean, log_std = actor(obs)
        std = log_std.exp()
        u = mean + std * torch.randn_like(mean)
        log_prob = (-0.5 * ((u - mean) / std).square() - log_std
                    - 0.5 * math.log(2 * math.pi)).sum(-1)
        log_prob = log_prob - (2 * (math.log(2) - u - F.softplus(-2 * u))).sum(-1)
        return torch.tanh(u), log_prob - log_scale

    b_obs = np.zeros((buffer_size, obs_dim), np.float32)
    b_next = np.zeros((buffer_size, obs_dim), np.float32)
    b_act = np.zeros((buffer_size, action_dim), np.float32)  # in [-1, 1]
    b_rew = np.zeros(buffer_size, np.float32)
    b_term = np.zeros(buffer_size, np.float32)
    pos, size = 0, 0
    rng = np.random.default_rng(seed)
    np_scale, np_bias = scale.numpy(), bias.numpy()

    eval_env = gym.make(env_id) if eval_interval is not None else None
    evaluations: list[tuple[int, float, float]] = []

    def evaluate() -> float:
        assert eval_env is not None
        returns = []
        for episode in range(eval_episodes):
            o, _ = eval_env.reset(seed=seed + 1_000_003 + episode)
            total, done = 0.0, False
            while not done:
                with torch.inference_mode():
                    mean, _ = actor(torch.from_numpy(o).unsqueeze(0))
                    action = (torch.tanh(mean) * scale + bias)[0].numpy()
                o, r, term, trunc, _ = eval_env.step(action)
                total, done = total + float(r), bool(term or trunc)
            returns.append(total)
        return float(np.mean(returns))

    obs, _ = envs.reset(seed=seed)
    env_steps = gradient_steps = 0
    start = time.perf_counter()
    while env_steps < num_steps:
        if env_steps < warmup_steps:
            actions = envs.action_space.sample()
            normalized = (actions - np_bias) / np_scale
        else:
            with torch.inference_mode():
                normalized = sample(torch.from_numpy(obs))[0].numpy()
            actions = normalized * np_scale + np_bias
        next_obs, rewards, terminated, _truncated, infos = envs.step(actions)
        real_next = next_obs
        if "_final_obs" in infos and infos["_final_obs"][0]:
            real_next = infos["final_obs"][0][None]
        b_obs[pos], b_next[pos], b_act[pos] = obs[0], real_next[0], normalized[0]
        b_rew[pos], b_term[pos] = rewards[0], terminated[0]
        pos = (pos + 1) % buffer_size
        size = min(size + 1, buffer_size)
        obs = next_obs
        env_steps += 1

        if size >= warmup_steps:
            idx = rng.integers(0, size, batch_size)
            o, n = torch.from_numpy(b_obs[idx]), torch.from_numpy(b_next[idx])
            a, r = torch.from_numpy(b_act[idx]), torch.from_numpy(b_rew[idx])
            d = torch.from_numpy(b_term[idx])
            alpha = log_alpha.detach().exp()
            with torch.no_grad():
                next_a, next_log_prob = sample(n)
                next_in = torch.cat([n, next_a], 1)
                next_q = torch.min(qf1_target(next_in), qf2_target(next_in)).squeeze(-1)
                target = r + gamma * (1.0 - d) * (next_q - alpha * next_log_prob)
            q_in = torch.cat([o, a], 1)
            qf_loss = (F.mse_loss(qf1(q_in).squeeze(-1), target)
                       + F.mse_loss(qf2(q_in).squeeze(-1), target))
            q_optimizer.zero_grad()
            qf_loss.backward()  # type: ignore[no-untyped-call]
            q_optimizer.step()

            pi, log_prob = sample(o)
            pi_in = torch.cat([o, pi], 1)
            actor_loss = (alpha * log_prob - torch.min(qf1(pi_in), qf2(pi_in)).squeeze(-1)).mean()
            actor_optimizer.zero_grad()
            actor_loss.backward()
            actor_optimizer.step()

            alpha_loss = -(log_alpha * (log_prob.detach() + target_entropy)).mean()
            a_optimizer.zero_grad()
            alpha_loss.backward()  # type: ignore[no-untyped-call]
            a_optimizer.step()

            with torch.no_grad():
                for target_param, param in target_pairs:
                    target_param.lerp_(param, tau)
            gradient_steps += 1
        if eval_interval is not None and env_steps % eval_interval == 0:
            evaluations.append((env_steps, time.perf_counter() - start, evaluate()))
    seconds = time.perf_counter() - start
    envs.close()
    if eval_env is not None:
        eval_env.close()
    return {"env_steps": env_steps, "gradient_steps": gradient_steps, "seconds": seconds,
            "evaluations": evaluations, "alpha": float(log_alpha.detach().exp())}


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval-interval", type=int, default=2_000)
    args = parser.parse_args()
    torch.set_num_threads(1)
    result = train(num_steps=args.steps, seed=args.seed, eval_interval=args.eval_interval)
    for steps, seconds, value in result["evaluations"]:
        print(f"{steps:,} env steps, {seconds:.0f} s: mean greedy return {value:.1f}")
    print({k: v for k, v in result.items() if k != "evaluations"})
