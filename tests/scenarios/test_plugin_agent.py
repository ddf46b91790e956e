"""A new agent is one file: written here (a REINFORCE with a learned baseline), it registers
itself with ``@register_agent`` and the ``rltrain`` command trains, resumes and evaluates it by
name (``--import``), with no rltrain file edited; an installed package's agent is found through
the ``rltrain.plugins`` entry points."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path
from typing import Any

import pytest
from conftest import assert_same_tensors, rltrain

from rltrain.checkpoint import read_checkpoint

#: Scenario tests of whole runs (subprocesses, real files): out of the fast inner loop,
#: ``pytest -m "not slow"``; CI runs them.
pytestmark = pytest.mark.slow

REINFORCE = '''
"""REINFORCE with a learned baseline (Williams 1992), one file."""
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.distributions import Categorical

from rltrain.agents.base import LearningAgent, Policy, SpaceError
from rltrain.agents.returns import gae
from rltrain.settings.registry import register_agent
from rltrain.types import PolicyStep


@dataclass
class ReinforceConfig:
    lr: float = 1e-2
    gamma: float = 0.99
    hidden_sizes: list[int] = field(default_factory=lambda: [32])


class ReinforcePolicy(Policy):
    def __init__(self, pi: nn.Module, v: nn.Module) -> None:
        super().__init__()
        self.pi, self.v = pi, v

    def act(self, obs, state, deterministic):
        dist = Categorical(logits=self.pi(obs))
        action = dist.probs.argmax(-1) if deterministic else dist.sample()
        return PolicyStep(action, None, {"log_prob": dist.log_prob(action),
                                         "value": self.v(obs).squeeze(-1)})


@register_agent("reinforce", ReinforceConfig, "Monte-Carlo policy gradient with a baseline")
class Reinforce(LearningAgent):

    def __init__(self, config: ReinforceConfig | None = None) -> None:
        super().__init__()
        self.config = config or ReinforceConfig()

    def check_spaces(self, observation_space, action_space):
        if not hasattr(action_space, "n"):
            raise SpaceError("reinforce acts in Discrete action spaces only.")

    def build(self, observation_space, action_space):
        size, width = observation_space.shape[0], self.config.hidden_sizes[0]
        self.pi = nn.Sequential(nn.Linear(size, width), nn.Tanh(), nn.Linear(width, action_space.n))
        self.v = nn.Sequential(nn.Linear(size, width), nn.Tanh(), nn.Linear(width, 1))

    def configure_optimizers(self):
        return {"pi": torch.optim.Adam(self.pi.parameters(), lr=self.config.lr),
                "v": torch.optim.Adam(self.v.parameters(), lr=self.config.lr)}

    def policy(self, device):
        return ReinforcePolicy(self.pi, self.v)

    def prepare_rollout(self, rollout):
        # Monte-Carlo returns: GAE with lambda = 1 over the rollout, bootstrapped at its end.
        values = rollout.values
        last = self.v(rollout.last_observations).squeeze(-1).detach()
        next_values = torch.cat([values[1:], last.unsqueeze(0)])
        advantages = gae(rollout.rewards, values, next_values, rollout.terminated,
                         rollout.truncated, self.config.gamma, 1.0)
        rollout.advantages.copy_(advantages)
        rollout.returns.copy_(advantages + values)

    def training_step(self, batch, optim):
        log_prob = Categorical(logits=self.pi(batch.observations)).log_prob(batch.actions)
        advantage = batch.returns - self.v(batch.observations).squeeze(-1).detach()
        pi_loss = -(log_prob * advantage).mean()                   # -E[log pi(a|s) (G - b(s))]
        v_loss = (self.v(batch.observations).squeeze(-1) - batch.returns).pow(2).mean()
        optim.step("pi", pi_loss)
        optim.step("v", v_loss)
        return {"pi_loss": pi_loss.detach(), "v_loss": v_loss.detach()}
'''

SETTINGS = ["agent.name=reinforce", "env.id=CartPole-v1", "strategy.n_steps=256",
            "strategy.batch_size=256", "strategy.update_epochs=1", "trainer.eval_interval=2048",
            "trainer.eval_episodes=5", "trainer.enable_progress_bar=false",
            "trainer.return_threshold=null", "trainer.checkpoint_interval=1024"]


@pytest.fixture
def agent_file(tmp_path: Path) -> Path:
    (tmp_path / "reinforce.py").write_text(textwrap.dedent(REINFORCE), encoding="utf-8")
    return tmp_path


def last_state(run_dir: Path) -> dict[str, Any]:
    return read_checkpoint(run_dir / "checkpoints" / "checkpoint-12288.pt")


def test_an_agent_in_its_own_file_is_listed_trained_and_resumed_by_name(
        agent_file: Path) -> None:
    listed = rltrain("list", "--import", "reinforce", cwd=agent_file)
    assert listed.returncode == 0, listed.stderr
    assert "reinforce" in listed.stdout and "Monte-Carlo policy gradient" in listed.stdout

    unknown = rltrain("fit", *SETTINGS, "trainer.num_steps=512", cwd=agent_file)
    assert unknown.returncode == 2
    assert "unknown agent 'reinforce'" in unknown.stderr and "--import" in unknown.stderr

    straight, resumed = agent_file / "straight", agent_file / "resumed"
    done = rltrain("fit", "--import", "reinforce", *SETTINGS, "trainer.num_steps=12288",
                   f"trainer.run_dir={straight}", cwd=agent_file)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((straight / "summary.json").read_text())
    assert summary["env_steps"] == 12288 and summary["gradient_steps"] == 12288 // 256
    assert summary["best_eval_return"] >= 60, summary  # CartPole's random policy: about 22

    half = rltrain("fit", "--import", "reinforce", *SETTINGS, "trainer.num_steps=6144",
                   f"trainer.run_dir={resumed}", cwd=agent_file)
    assert half.returncode == 0, half.stderr[-3000:]
    rest = rltrain("fit", "--import", "reinforce", "--resume", str(resumed),
                   "trainer.num_steps=12288", cwd=agent_file)
    assert rest.returncode == 0, rest.stderr[-3000:]
    a, b = last_state(straight), last_state(resumed)
    assert a["progress"] == b["progress"]
    assert_same_tensors(a["agent"], b["agent"], "agent")
    assert_same_tensors(a["optimization"], b["optimization"], "optimization")

    evaluated = rltrain("evaluate", "--import", "reinforce", str(straight), "--episodes", "2",
                        cwd=agent_file)
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]


def test_an_installed_package_registers_its_agent_through_the_entry_points(
        agent_file: Path) -> None:
    """A distribution on the path whose ``rltrain.plugins`` entry point names the module: no
    --import needed."""
    site = agent_file / "site"
    info = site / "reinforce_plugin-0.1.dist-info"
    info.mkdir(parents=True)
    (agent_file / "reinforce.py").rename(site / "reinforce_plugin.py")
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: reinforce-plugin\n"
                                   "Version: 0.1\n")
    (info / "entry_points.txt").write_text("[rltrain.plugins]\nreinforce = reinforce_plugin\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(site), *filter(None, [os.environ.get("PYTHONPATH")])])}
    listed = rltrain("list", cwd=agent_file, env=env)
    assert listed.returncode == 0, listed.stderr
    assert "reinforce" in listed.stdout
    done = rltrain("fit", *SETTINGS, "trainer.num_steps=512", "trainer.eval_interval=null",
                   f"trainer.run_dir={agent_file / 'run'}", cwd=agent_file, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((agent_file / "run" / "summary.json").read_text())["gradient_steps"] == 2
