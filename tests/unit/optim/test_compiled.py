"""``trainer.compile``: the networks compiled in place (checkpoints unchanged), compiled and eager
losses equal within float tolerance over 20+ gradient steps for DQN, PPO and SAC, exact resume
with compile on, NaN refusal kept, and bad values refused naming the accepted ones."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import QUIET, assert_same_tensors, small, straight_and_resumed

from rltrain import (
    DQN,
    PPO,
    SAC,
    DQNConfig,
    OnPolicyConfig,
    OnPolicyStrategy,
    PPOConfig,
    SACConfig,
    Trainer,
)
from rltrain.observe import EventRecorder, TrainStep
from rltrain.optim.compiled import compile_mode, is_compiled, networks

CASES: dict[str, tuple[str, Any, Any, int]] = {
    "dqn": ("CartPole-v1", lambda: DQN(DQNConfig(hidden_sizes=[32])), lambda: small(), 300),
    "ppo": ("CartPole-v1", lambda: PPO(PPOConfig(hidden_sizes=[32])),
            lambda: OnPolicyStrategy(OnPolicyConfig(num_envs=2, n_steps=32, batch_size=32,
                                                    update_epochs=2)), 192),
    "sac": ("Pendulum-v1", lambda: SAC(SACConfig(hidden_sizes=[32])),
            lambda: small(train_interval=10, train_steps=1), 260),
}


def losses(name: str, run_dir: Path, compile: bool) -> tuple[list[float], Any]:
    env, agent_factory, strategy, steps = CASES[name]
    recorder, agent = EventRecorder(), agent_factory()
    Trainer(num_steps=steps, strategy=strategy(), run_dir=run_dir, compile=compile,
            eval_interval=None, callbacks=[recorder], **QUIET).fit(env, agent)
    values = [float(e.metrics[key]) for e in recorder.of(TrainStep)
              for key in sorted(e.metrics) if "loss" in key]
    return values, agent


@pytest.mark.slow  # torch.compile's first compile: 2-4 s a case
@pytest.mark.parametrize("name", list(CASES))
def test_compiled_losses_match_eager_within_float_tolerance(name: str, tmp_path: Path) -> None:
    eager, _ = losses(name, tmp_path / "eager", compile=False)
    compiled, agent = losses(name, tmp_path / "compiled", compile=True)
    assert len(eager) >= 20 and len(compiled) == len(eager)
    assert compiled == pytest.approx(eager, rel=1e-3, abs=1e-4)
    assert networks(agent) and all(is_compiled(n) for n in networks(agent))
    # in place: the compiled agent's state has the eager agent's keys (no "_orig_mod."), so
    # checkpoints are unchanged
    _, eager_agent = losses(name, tmp_path / "again", compile=False)
    assert list(agent.state_dict()) == list(eager_agent.state_dict())
    eager_agent.load_state_dict(agent.state_dict())


def test_a_compiled_run_resumes_exactly(tmp_path_factory: pytest.TempPathFactory) -> None:
    def fit(run_dir: Path, num_steps: int, ckpt_path: str | None = None) -> None:
        Trainer(num_steps=num_steps, strategy=small(), run_dir=run_dir, compile=True,
                eval_interval=None, **QUIET).fit(
            "CartPole-v1", DQN(DQNConfig(hidden_sizes=[32])), ckpt_path=ckpt_path)

    straight, split = straight_and_resumed(fit, tmp_path_factory, 400)
    a = torch.load(straight / "checkpoints" / "last.pt", weights_only=True)
    b = torch.load(split / "checkpoints" / "last.pt", weights_only=True)
    assert_same_tensors(a["agent"], b["agent"], "agent")
    assert_same_tensors(a["optimization"], b["optimization"], "optimization")


def test_a_non_finite_loss_is_refused_with_compile_on(tmp_path: Path) -> None:
    agent = DQN(DQNConfig(hidden_sizes=[32], lr=1e30))  # diverges within a few steps
    trainer = Trainer(num_steps=2000, strategy=small(), run_dir=tmp_path, compile=True,
                      eval_interval=None, **QUIET)
    result = trainer.fit("CartPole-v1", agent)
    assert result.summary.stop_reason is not None
    assert result.summary.stop_reason.startswith("non-finite loss")
    assert all(torch.isfinite(p).all() for p in agent.parameters())


def test_compile_values() -> None:
    assert compile_mode(False) is None and compile_mode(True) == "default"
    assert compile_mode("reduce-overhead") == "reduce-overhead"
    for bad in ("fast", 1, None):
        with pytest.raises(ValueError, match="compile must be false, true, 'default'"):
            compile_mode(bad)
    with pytest.raises(ValueError, match="compile must be"):
        Trainer(compile="fast")
