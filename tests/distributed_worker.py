"""What each process of the distributed tests runs (tests/scenarios/test_distributed.py starts it
under
``torchrun --standalone --nproc-per-node=2``, gloo on the CPU). Each case writes its findings to
``<out>/<case>-rank<r>.json``, which the test reads back and compares.

    torchrun --standalone --nproc-per-node=2 tests/distributed_worker.py updates OUT
    torchrun --standalone --nproc-per-node=2 tests/distributed_worker.py cli OUT fit ... --then ...
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch

from rltrain import (
    DQN,
    PPO,
    SAC,
    TD3,
    DQNConfig,
    OnPolicyConfig,
    OnPolicyStrategy,
    PPOConfig,
    SACConfig,
    TD3Config,
    Trainer,
)
from rltrain.agents.nn.normalize import RunningMeanStd
from rltrain.buffers import ReplayBatch
from rltrain.buffers.rollout import RolloutBatch, RolloutBuffer
from rltrain.optim import Optimization, OptimizationSettings
from rltrain.runtime.distributed import (
    SINGLE,
    DistributedContext,
    connect,
    exit_process,
    moments_mean_std,
)
from rltrain.runtime.statistics import Statistics
from rltrain.types import Progress

B = 64  # the whole batch; each of the two ranks takes half


def built(agent: Any, env_id: str) -> Any:
    torch.manual_seed(0)  # the same initial weights on every rank and in the reference
    env = gym.make(env_id)
    agent.setup(observation_space=env.observation_space, action_space=env.action_space,
                device=torch.device("cpu"), progress=Progress())
    env.close()
    return agent


def flat(agent: Any) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in agent.parameters()])


def dqn_batch(generator: torch.Generator) -> ReplayBatch:
    return ReplayBatch(torch.randn(B, 4, generator=generator),
                       torch.randint(0, 2, (B,), generator=generator),
                       torch.randn(B, generator=generator), torch.randn(B, 4, generator=generator),
                       (torch.rand(B, generator=generator) < 0.1).float(), torch.zeros(B))


def sac_batch(generator: torch.Generator) -> ReplayBatch:
    return ReplayBatch(torch.randn(B, 3, generator=generator),
                       torch.rand(B, 1, generator=generator) * 4 - 2,
                       torch.randn(B, generator=generator), torch.randn(B, 3, generator=generator),
                       torch.zeros(B), torch.zeros(B))


def ppo_batch(agent: PPO, generator: torch.Generator) -> RolloutBatch:
    obs = torch.randn(B, 4, generator=generator)
    with torch.no_grad():
        dist, values = agent.net(obs)
        actions = dist.sample()
        log_probs = dist.log_prob(actions)
    advantages = torch.randn(B, generator=generator) * 3 + 1
    return RolloutBatch(obs, actions, log_probs + 0.05 * torch.randn(B, generator=generator),
                        values, advantages, values + advantages)


def half(batch: Any, rank: int) -> Any:
    return type(batch)(*(None if t is None else t[rank * B // 2:(rank + 1) * B // 2]
                         for t in batch))


def one_update(agent: Any, batch: Any, context: DistributedContext, *,
               seed: int, skip: int = 0) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """One gradient step of ``agent`` on ``batch``; returns its weights after it and the
    gradients every optimizer stepped with. ``skip``: standard normals drawn and dropped first,
    so a rank's draws continue where the whole batch's first half ended."""
    agent.distributed = context
    optim = Optimization(agent.configure_optimizers(), progress=agent.progress, sync=context)
    stepped: list[torch.Tensor] = []
    for optimizer in optim.optimizers.values():
        optimizer.register_step_pre_hook(lambda opt, args, kwargs: stepped.append(torch.cat(
            [p.grad.reshape(-1) for g in opt.param_groups for p in g["params"]
             if p.grad is not None]).clone()))
    torch.manual_seed(seed)
    if skip:
        torch.randn(skip)
    optim.training_step(agent, batch)
    return flat(agent), stepped


def case_updates(context: DistributedContext, out: Path) -> dict[str, Any]:
    """World 2 x batch B/2 against world 1 x batch B, for DQN, PPO, SAC and TD3; the gradients each
    rank stepped with; and a non-finite loss on one rank only."""
    found: dict[str, Any] = {}
    rank = context.rank
    for name, make, env_id in (("dqn", lambda: DQN(DQNConfig(hidden_sizes=[32, 32])),
                                "CartPole-v1"),
                               ("ppo", lambda: PPO(PPOConfig(hidden_sizes=[32, 32])),
                                "CartPole-v1"),
                               ("sac", lambda: SAC(SACConfig(hidden_sizes=[32, 32])),
                                "Pendulum-v1"),
                               # the actor steps on this one gradient step too
                               ("td3", lambda: TD3(TD3Config(hidden_sizes=[32, 32],
                                                             policy_delay=1)),
                                "Pendulum-v1")):
        generator = torch.Generator().manual_seed(123)  # the same whole batch everywhere
        reference_agent = built(make(), env_id)
        batch = (ppo_batch(reference_agent, generator) if name == "ppo"
                 else dqn_batch(generator) if name == "dqn" else sac_batch(generator))
        # SAC draws 2 normals per sample (B/2 x 2 x 1 per rank), TD3 one (its smoothing
        # noise): rank 1 starts after rank 0's.
        skip = rank * (B // 2) * {"sac": 2, "td3": 1}.get(name, 0)
        reference, reference_grads = one_update(reference_agent, batch, SINGLE, seed=7)
        split, grads = one_update(built(make(), env_id), half(batch, rank), context, seed=7,
                                  skip=skip)
        whole, mine = torch.cat(reference_grads), torch.cat(grads)
        found[name] = {"weight_difference": float((split - reference).abs().max()),
                       "grad_difference": float((mine - whole).abs().max()),
                       "grad_scale": float(whole.abs().max()),
                       "optimizers": len(grads),
                       "weights": split.tolist(), "grads": mine.tolist()}
    # A NaN reward on rank 1 only: both ranks refuse the update (skip), neither waits.
    agent = built(DQN(DQNConfig(hidden_sizes=[16])), "CartPole-v1")
    before = flat(agent)
    batch = half(dqn_batch(torch.Generator().manual_seed(5)), rank)
    if rank == 1:
        batch.rewards[0] = float("nan")
    agent.distributed = context
    optim = Optimization(agent.configure_optimizers(), progress=agent.progress,
                         settings=OptimizationSettings(on_nan_loss="skip"), sync=context)
    optim.training_step(agent, batch)
    found["nan"] = {"unchanged": bool(torch.equal(flat(agent), before)),
                    "refused": optim.non_finite_loss}
    good = half(dqn_batch(torch.Generator().manual_seed(6)), rank)
    optim.training_step(agent, good)  # the next finite step is applied on both
    found["nan"]["after"] = flat(agent).tolist()
    # A minibatch's advantage moments shared once per update normalise it as a collective
    # at every gradient step would.
    env = gym.make("CartPole-v1")
    rollout = RolloutBuffer(8, num_envs=2, observation_space=env.observation_space,
                            action_space=env.action_space, seed=rank)
    rollout.advantages.copy_(torch.randn(8, 2, generator=torch.Generator().manual_seed(rank)))
    rollout.shuffle(2)
    rollout.share_advantage_moments(4, Statistics(context))
    shared = []
    for index in range(8):
        minibatch = rollout.minibatch(index, 4)
        assert minibatch.advantage_moments is not None
        mean, std = moments_mean_std(minibatch.advantage_moments)
        each_step = context.mean_std(minibatch.advantages)
        shared.append([float(mean - each_step[0]), float(std - each_step[1]), float(std)])
    found["moments"] = shared
    # An error rank 0 meets in on_main is the same kind of error on rank 1.
    def refuse() -> None:
        raise FileExistsError("the folder is theirs")

    try:
        context.on_main(refuse)
    except Exception as error:
        found["forwarded"] = [type(error).__name__, str(error)]
    # Running statistics of every rank's batch together equal those of the whole batch.
    whole = torch.randn(2 * 50, 3, generator=torch.Generator().manual_seed(8)) * 4 + 2
    together, alone = RunningMeanStd((3,)), RunningMeanStd((3,))
    together.update(whole[rank * 50:(rank + 1) * 50], Statistics(context))
    alone.update(whole)
    found["statistics"] = {"difference": max(float((a - b).abs().max()) for a, b in zip(
        together.buffers(), alone.buffers(), strict=True)), "mean": together.mean.tolist()}
    return found


class StopOnRank1(gym.Wrapper[Any, Any, Any, Any]):
    """Asks the run to stop from rank 1's own env at its 300th step (rank 0 never does)."""

    trainer: Trainer | None = None

    def __init__(self, env: gym.Env[Any, Any], rank: int) -> None:
        super().__init__(env)
        self.rank, self.steps = rank, 0

    def step(self, action: Any) -> Any:
        self.steps += 1
        if self.rank == 1 and self.steps == 300 and self.trainer is not None:
            self.trainer.interrupter.stop("rank 1's own request")
        return super().step(action)


def case_stop(context: DistributedContext, out: Path) -> dict[str, Any]:
    """A stop requested on rank 1 alone stops both ranks at the same step; PPO's early end of
    an update on one rank ends it on both."""
    trainer = Trainer(num_steps=20_000, run_dir=out / "stop-run", eval_interval=None,
                      enable_progress_bar=False, enable_console=False, logger=False,
                      devices=2, num_nodes=1, strategy=OnPolicyStrategy(OnPolicyConfig(
                          n_steps=128, batch_size=64, update_epochs=2)))
    StopOnRank1.trainer = trainer
    agent = PPO(PPOConfig(hidden_sizes=[16], normalize_observations=True,
                          normalize_rewards=True))
    result = trainer.fit(lambda: StopOnRank1(gym.make("CartPole-v1"), context.rank), agent)

    class EndsOnRank0(PPO):
        def update_done(self, metrics: Any) -> bool:
            return context.rank == 0 and self.progress.gradient_steps % 10 == 3

    kl_trainer = Trainer(num_steps=2 * 256, run_dir=out / "kl-run", eval_interval=None,
                         enable_progress_bar=False, enable_console=False, logger=False,
                         strategy=OnPolicyStrategy(OnPolicyConfig(
                             num_envs=2, n_steps=64, batch_size=32, update_epochs=4)))
    kl = kl_trainer.fit("CartPole-v1", EndsOnRank0(PPOConfig(hidden_sizes=[16])))
    return {"env_steps": result.summary.env_steps, "reason": result.summary.stop_reason,
            "run_statistics": [b.reshape(-1).tolist() for b in agent.buffers()],
            "episodes": result.summary.episodes,
            "kl_gradient_steps": kl.summary.gradient_steps}


WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def case_cli(context: DistributedContext, out: Path) -> dict[str, Any]:
    """``rltrain fit`` commands (separated by ``--then``), this process's file writes recorded
    by an audit hook (every ``open`` for writing, ``os.rename``/``os.replace``, ``os.mkdir``,
    ``os.remove``, from Python or from the libraries it calls through Python)."""
    from rltrain.cli import main as cli

    writes: list[str] = []
    recording = True

    def audit(event: str, args: tuple[Any, ...]) -> None:
        if not recording:
            return
        if event == "open":
            path, mode, flags = args
            if (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                    mode is None and isinstance(flags, int) and flags & WRITE_FLAGS):
                writes.append(f"open {path}")
        elif event in ("os.rename", "os.mkdir", "os.remove", "os.link", "os.symlink"):
            path = args[1] if event in ("os.rename", "os.link") else args[0]
            writes.append(f"{event} {path}")

    sys.addaudithook(audit)
    commands = " ".join(sys.argv[3:]).split(" --then ")
    codes = [cli(command.split()) for command in commands]
    recording = False
    return {"codes": codes, "writes": writes}


def main() -> None:
    case, out = sys.argv[1], Path(sys.argv[2])
    torch.set_num_threads(1)
    context = connect("cpu")
    cases = {"updates": case_updates, "stop": case_stop, "cli": case_cli,
             "units": lambda context, out: {**case_updates(context, out),
                                            **case_stop(context, out)}}
    found = cases[case](context, out)
    found["rank"], found["world_size"] = context.rank, context.world_size
    (out / f"{case}-rank{context.rank}.json").write_text(json.dumps(found))


if __name__ == "__main__":
    main()
    exit_process(0)  # as the rltrain command ends: no C++ teardown that could abort this rank
