"""A minimal hand-written DQN loop: the baseline rltrain's loop is measured against.

Same algorithm and hyperparameters as rltrain's DQN with ``OffPolicyStrategy`` (double DQN,
Huber loss, gradient norm clip 10, hard target update every 128 gradient steps, linear epsilon,
uniform replay in numpy, train every 256 env steps for 128 gradient steps after 1,000 random
steps), written as one function with nothing but the math and the bookkeeping it needs.
"""

from __future__ import annotations

import copy
import random
import time
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


def train(*, env_id: str = "CartPole-v1", num_envs: int = 1, num_steps: int = 20_000,
          seed: int = 0, buffer_size: int = 100_000, batch_size: int = 64,
          warmup_steps: int = 1_000, train_interval: int = 256, train_steps: int = 128,
          lr: float = 2.3e-3, gamma: float = 0.99, target_update_interval: int = 128,
          epsilon_start: float = 1.0, epsilon_end: float = 0.04,
          exploration_steps: int = 8_000, max_grad_norm: float = 10.0,
          fused_adam: bool = False, double_q: bool = True, eval_interval: int | None = None,
          eval_episodes: int = 20, return_threshold: float | None = None) -> dict[str, Any]:
    """Train for ``num_steps`` env steps; returns env steps, gradient steps and seconds.

    ``fused_adam=True`` uses the single-kernel Adam step that rltrain's DQN uses; the default is
    the plain ``torch.optim.Adam`` a hand-written loop would have. ``double_q=False`` is the
    Nature DQN target (as Stable-Baselines3's DQN). With ``eval_interval``, ``eval_episodes``
    greedy episodes run every that many env steps (and the returns are reported); with
    ``return_threshold`` too, training stops at the first evaluation whose mean reaches it.
    """
    start = time.perf_counter()  # the setup counts, as in rltrain's fit and SB3's timing
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    envs = gym.make_vec(env_id, num_envs, vectorization_mode="sync",
                        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP})
    envs.action_space.seed(seed)
    obs_dim = int(np.prod(envs.single_observation_space.shape or ()))
    n_actions = int(envs.single_action_space.n)  # type: ignore[attr-defined]
    q_network = nn.Sequential(nn.Linear(obs_dim, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                              nn.Linear(256, n_actions))
    target_network = copy.deepcopy(q_network).requires_grad_(False)
    optimizer = torch.optim.Adam(q_network.parameters(), lr=lr, fused=fused_adam)

    b_obs = np.zeros((buffer_size, obs_dim), np.float32)
    b_next = np.zeros((buffer_size, obs_dim), np.float32)
    b_act = np.zeros(buffer_size, np.int64)
    b_rew = np.zeros(buffer_size, np.float32)
    b_term = np.zeros(buffer_size, np.float32)
    pos, size = 0, 0
    rng = np.random.default_rng(seed)

    eval_env = gym.make(env_id)
    evaluations: list[tuple[int, float, float]] = []  # env steps, seconds, mean return

    def evaluate() -> float:
        returns = []
        for episode in range(eval_episodes):
            o, _ = eval_env.reset(seed=seed + 1_000_003 + episode)
            total, done = 0.0, False
            while not done:
                with torch.inference_mode():
                    action = int(q_network(torch.from_numpy(o).unsqueeze(0)).argmax(1))
                o, r, term, trunc, _ = eval_env.step(action)
                total, done = total + float(r), bool(term or trunc)
            returns.append(total)
        return float(np.mean(returns))

    obs, _ = envs.reset(seed=seed)
    env_steps = gradient_steps = 0
    while env_steps < num_steps:
        epsilon = max(epsilon_end, epsilon_start
                      + (epsilon_end - epsilon_start) * env_steps / exploration_steps)
        if env_steps < warmup_steps or random.random() < epsilon:
            actions = envs.action_space.sample()
        else:
            with torch.inference_mode():
                actions = q_network(torch.from_numpy(obs)).argmax(1).numpy()
        next_obs, rewards, terminated, _truncated, infos = envs.step(actions)
        real_next = next_obs
        if "_final_obs" in infos:
            real_next = next_obs.copy()
            for i in np.flatnonzero(infos["_final_obs"]):
                real_next[i] = infos["final_obs"][i]
        for i in range(num_envs):  # type: ignore[assignment]
            b_obs[pos], b_next[pos], b_act[pos] = obs[i], real_next[i], actions[i]
            b_rew[pos], b_term[pos] = rewards[i], terminated[i]
            pos = (pos + 1) % buffer_size
            size = min(size + 1, buffer_size)
        obs = next_obs
        before, env_steps = env_steps, env_steps + num_envs

        if env_steps >= warmup_steps and env_steps // train_interval > before // train_interval:
            for _ in range(train_steps):
                idx = rng.integers(0, size, batch_size)
                o, n = torch.from_numpy(b_obs[idx]), torch.from_numpy(b_next[idx])
                a, r = torch.from_numpy(b_act[idx]), torch.from_numpy(b_rew[idx])
                d = torch.from_numpy(b_term[idx])
                with torch.no_grad():
                    if double_q:
                        next_a = q_network(n).argmax(1, keepdim=True)
                        next_q = target_network(n).gather(1, next_a).squeeze(1)
                    else:
                        next_q = target_network(n).max(1).values
                    td_target = r + gamma * (1.0 - d) * next_q
                q = q_network(o).gather(1, a.unsqueeze(1)).squeeze(1)
                loss = F.huber_loss(q, td_target)
                optimizer.zero_grad()
                loss.backward()  # type: ignore[no-untyped-call]
                nn.utils.clip_grad_norm_(q_network.parameters(), max_grad_norm)
                optimizer.step()
                gradient_steps += 1
                if gradient_steps % target_update_interval == 0:
                    target_network.load_state_dict(q_network.state_dict())
        if eval_interval is not None and env_steps // eval_interval > before // eval_interval:
            evaluations.append((env_steps, time.perf_counter() - start, evaluate()))
            if return_threshold is not None and evaluations[-1][2] >= return_threshold:
                break
    seconds = time.perf_counter() - start
    envs.close()
    eval_env.close()
    return {"env_steps": env_steps, "gradient_steps": gradient_steps, "seconds": seconds,
            "evaluations": evaluations}
