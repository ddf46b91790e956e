"""A minimal hand-written PPO loop (CleanRL-style, one function): the speed baseline of
``benchmarks.ppo_speed``.

Same algorithm, network and hyperparameters as rltrain's PPO with ``configs/ppo_cartpole.yaml``
(RL-Zoo's tuned CartPole-v1 PPO): 8 sub-environments (Gymnasium ``SyncVectorEnv``, autoreset in
the same step, as rltrain's), rollouts of 32 vector steps, 20 epochs of minibatches of 256,
separate 64x64 tanh actor and critic with orthogonal init (gain √2, 0.01 for the policy head, 1
for the value head), Adam eps 1e-5 at 1e-3 annealed linearly to 0 with the clip range (0.2),
gamma 0.98, GAE lambda 0.8, time limits bootstrapped from the true final observation,
advantages normalised per minibatch, Stable-Baselines3's value loss (MSE, without CleanRL's
0.5, times vf_coef 0.5), no value clipping, no entropy bonus, gradient norm clip 0.5. Discrete
actions only. Nothing but the math and the bookkeeping it needs.
"""

from __future__ import annotations

import random
import time
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.distributions import Categorical


def _linear(n_in: int, n_out: int, gain: float) -> nn.Linear:
    out = nn.Linear(n_in, n_out)
    nn.init.orthogonal_(out.weight, gain)
    nn.init.zeros_(out.bias)
    return out


def train(*, env_id: str = "CartPole-v1", num_envs: int = 8, num_steps: int = 100_000,
          n_steps: int = 32, batch_size: int = 256, update_epochs: int = 20, seed: int = 0,
          lr: float = 1e-3, anneal: bool = True, clip_range: float = 0.2, gamma: float = 0.98,
          gae_lambda: float = 0.8, ent_coef: float = 0.0, vf_coef: float = 0.5,
          max_grad_norm: float = 0.5, hidden: int = 64, eval_interval: int | None = None,
          eval_episodes: int = 20, return_threshold: float | None = None) -> dict[str, Any]:
    """Train for ``num_steps`` env steps (a last partial rollout is collected, not learned
    from, as in rltrain); returns env steps, gradient steps, seconds and evaluations.

    With ``eval_interval``, ``eval_episodes`` greedy episodes run every that many env steps;
    with ``return_threshold`` too, training stops at the first evaluation whose mean reaches it.
    """
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    envs = gym.make_vec(env_id, num_envs, vectorization_mode="sync",
                        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP})
    envs.action_space.seed(seed)
    obs_dim = int(np.prod(envs.single_observation_space.shape or ()))
    n_actions = int(envs.single_action_space.n)  # type: ignore[attr-defined]
    root2 = float(np.sqrt(2))
    actor = nn.Sequential(_linear(obs_dim, hidden, root2), nn.Tanh(),
                          _linear(hidden, hidden, root2), nn.Tanh(),
                          _linear(hidden, n_actions, 0.01))
    critic = nn.Sequential(_linear(obs_dim, hidden, root2), nn.Tanh(),
                           _linear(hidden, hidden, root2), nn.Tanh(), _linear(hidden, 1, 1.0))
    params = [*actor.parameters(), *critic.parameters()]
    optimizer = torch.optim.Adam(params, lr=lr, eps=1e-5)

    rollout_size = n_steps * num_envs
    obs_buf = torch.zeros(n_steps, num_envs, obs_dim)
    act_buf = torch.zeros(n_steps, num_envs, dtype=torch.long)
    logp_buf = torch.zeros(n_steps, num_envs)
    rew_buf = torch.zeros(n_steps, num_envs)
    done_buf = torch.zeros(n_steps, num_envs)
    val_buf = torch.zeros(n_steps, num_envs)

    eval_env = gym.make(env_id)
    evaluations: list[tuple[int, float, float]] = []  # env steps, seconds, mean return

    def evaluate() -> float:
        returns = []
        for episode in range(eval_episodes):
            o, _ = eval_env.reset(seed=seed + 1_000_003 + episode)
            total, done = 0.0, False
            while not done:
                with torch.no_grad():
                    action = int(actor(torch.as_tensor(o).unsqueeze(0)).argmax(1))
                o, r, term, trunc, _ = eval_env.step(action)
                total, done = total + float(r), bool(term or trunc)
            returns.append(total)
        return float(np.mean(returns))

    next_obs = torch.as_tensor(envs.reset(seed=seed)[0])
    env_steps = gradient_steps = 0
    start = time.perf_counter()
    while env_steps < num_steps:
        frac = max(0.0, 1.0 - env_steps / num_steps) if anneal else 1.0
        optimizer.param_groups[0]["lr"] = lr * frac
        clip = clip_range * frac
        stopped = False
        for t in range(n_steps):
            with torch.no_grad():
                logits, value = actor(next_obs), critic(next_obs).squeeze(-1)
                dist = Categorical(logits=logits)
                action = dist.sample()  # type: ignore[no-untyped-call]
                logp_buf[t] = dist.log_prob(action)  # type: ignore[no-untyped-call]
            obs_buf[t], act_buf[t], val_buf[t] = next_obs, action, value
            obs_np, reward, terminated, truncated, infos = envs.step(action.numpy())
            reward_t = torch.as_tensor(reward, dtype=torch.float32)
            if truncated.any():  # bootstrap a time limit from the true final observation
                idx = np.flatnonzero(truncated & ~terminated)
                if idx.size:
                    final = torch.as_tensor(np.stack(infos["final_obs"][idx]))
                    with torch.no_grad():
                        reward_t[idx] += gamma * critic(final).squeeze(-1)
            rew_buf[t] = reward_t
            done_buf[t] = torch.as_tensor(terminated | truncated, dtype=torch.float32)
            next_obs = torch.as_tensor(obs_np)
            before, env_steps = env_steps, env_steps + num_envs
            if eval_interval is not None and env_steps // eval_interval > before // eval_interval:
                evaluations.append((env_steps, time.perf_counter() - start, evaluate()))
                if return_threshold is not None and evaluations[-1][2] >= return_threshold:
                    stopped = True
                    break
            if env_steps >= num_steps and t < n_steps - 1:
                stopped = True  # a last rollout cut short is not learned from
                break
        if stopped:
            break

        with torch.no_grad():  # GAE(lambda), the chain cut where an episode ended
            next_value = critic(next_obs).squeeze(-1)
            advantages = torch.zeros_like(rew_buf)
            last = torch.zeros(num_envs)
            for t in reversed(range(n_steps)):
                not_done = 1.0 - done_buf[t]
                following = next_value if t == n_steps - 1 else val_buf[t + 1]
                delta = rew_buf[t] + gamma * following * not_done - val_buf[t]
                last = delta + gamma * gae_lambda * not_done * last
                advantages[t] = last
            returns = advantages + val_buf

        b_obs, b_act = obs_buf.reshape(rollout_size, obs_dim), act_buf.reshape(-1)
        b_logp, b_adv = logp_buf.reshape(-1), advantages.reshape(-1)
        b_ret = returns.reshape(-1)
        for _ in range(update_epochs):
            order = torch.randperm(rollout_size)
            for first in range(0, rollout_size, batch_size):
                mb = order[first:first + batch_size]
                dist = Categorical(logits=actor(b_obs[mb]))
                log_ratio = dist.log_prob(b_act[mb]) - b_logp[mb]  # type: ignore[no-untyped-call]
                ratio = log_ratio.exp()
                adv = b_adv[mb]
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                policy_loss = torch.max(-adv * ratio, -adv * ratio.clamp(1 - clip, 1 + clip)).mean()
                value_loss = F.mse_loss(critic(b_obs[mb]).squeeze(-1), b_ret[mb])
                entropy = dist.entropy().mean()  # type: ignore[no-untyped-call]
                loss = policy_loss + vf_coef * value_loss - ent_coef * entropy
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(params, max_grad_norm)
                optimizer.step()
                gradient_steps += 1
    seconds = time.perf_counter() - start
    envs.close()
    eval_env.close()
    return {"env_steps": env_steps, "gradient_steps": gradient_steps, "seconds": seconds,
            "evaluations": evaluations}


if __name__ == "__main__":  # a learning check: python -m benchmarks.handwritten_ppo
    torch.set_num_threads(1)
    for s in (0, 1, 2):
        result = train(seed=s, eval_interval=5_000, return_threshold=475.0)
        print(f"seed {s}: {result['env_steps']:,} env steps, {result['seconds']:.1f} s, "
              "evaluations " + " ".join(f"{e[0] / 1000:g}k:{e[2]:.0f}"
                                        for e in result["evaluations"]), flush=True)
