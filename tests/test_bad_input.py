"""Every bad input gets an error that names the problem and the fix, before training if it can.

The cases here are the table in docs/bad_input.md; ``test_the_docs_table_lists_every_case``
keeps the two in step (regenerate the table with ``python scripts/bad_input_table.py``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import QUIET

from rltrain import DQN, DQNConfig, OffPolicyConfig, OffPolicyStrategy, Trainer
from rltrain.agents.dreamer import Dreamer, DreamerConfig
from rltrain.checkpoint import Checkpointer, atomic_save
from rltrain.envs import EnvSpec
from rltrain.errors import TrainingError

DOCS = Path(__file__).resolve().parent.parent / "docs" / "bad_input.md"


def small(**overrides: Any) -> OffPolicyStrategy:
    settings: dict[str, Any] = dict(warmup_steps=50, train_interval=25, train_steps=2,
                                    batch_size=16, buffer_size=1000)
    settings.update(overrides)
    return OffPolicyStrategy(OffPolicyConfig(**settings))


def trainer(run_dir: Path, num_steps: int = 200, **kwargs: Any) -> Trainer:
    """A quiet Trainer of the ``small()`` strategy that never evaluates (unless told)."""
    kwargs.setdefault("eval_interval", None)
    return Trainer(num_steps=num_steps, strategy=kwargs.pop("strategy", small()),
                   run_dir=run_dir, **QUIET, **kwargs)


def dqn() -> DQN:
    return DQN(DQNConfig(hidden_sizes=[16]))


class Poisoned(gym.Wrapper[Any, Any, Any, Any]):
    """CartPole whose observation (or reward) turns NaN at a given step."""

    def __init__(self, env: gym.Env[Any, Any], at: int, what: str) -> None:
        super().__init__(env)
        self.at, self.what, self.steps = at, what, 0

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.steps += 1
        if self.steps == self.at:
            if self.what == "observation":
                obs = np.full_like(obs, np.nan)
            else:
                reward = math.inf
        return obs, reward, terminated, truncated, info


def poisoned(what: str) -> Callable[[], gym.Env[Any, Any]]:
    def make() -> gym.Env[Any, Any]:
        return Poisoned(gym.make("CartPole-v1"), at=30, what=what)
    return make


class NanLossDQN(DQN):
    """A DQN whose loss is NaN from the 3rd gradient step on."""

    def training_step(self, batch: Any, optim: Any) -> Any:
        if self.progress.gradient_steps >= 2:
            loss = self.q_network(batch.observations).sum() * torch.tensor(float("nan"))
            optim.step("q", loss)
            return {"loss": loss.detach()}
        return super().training_step(batch, optim)


def fitted(run_dir: Path, **kwargs: Any) -> Path:
    trainer(run_dir, **kwargs).fit("CartPole-v1", dqn())
    return run_dir


# Each case: (what is wrong, a function that does it, the exception, a regex of the message).
@dataclass(frozen=True)
class Case:
    name: str
    run: Callable[[Path], object]
    error: type[BaseException]
    message: str


CASES = [
    Case("unknown env id", lambda d: trainer(d).fit("CartPol-v1", dqn()), ValueError,
         r"Unknown Gymnasium environment id 'CartPol-v1'\. Did you mean 'CartPole-v1'"),
    Case("action space the agent cannot handle",
         lambda d: trainer(d).fit("Pendulum-v1", dqn()), ValueError,
         r"DQN needs a Discrete action space; got Box.*Use an agent for continuous actions"),
    Case("num_steps < 1", lambda d: Trainer(num_steps=0), ValueError,
         r"num_steps must be >= 1 env step; got 0"),
    Case("batch size larger than the buffer",
         lambda d: OffPolicyConfig(batch_size=512, buffer_size=256), ValueError,
         r"batch_size \(512\) is larger than buffer_size \(256\); raise buffer_size"),
    Case("eval_episodes < 1", lambda d: Trainer(eval_episodes=0), ValueError,
         r"eval_episodes must be >= 1; got 0"),
    Case("negative warmup_steps", lambda d: OffPolicyConfig(warmup_steps=-1), ValueError,
         r"warmup_steps must be >= 0; got -1"),
    Case("learning rate <= 0", lambda d: DQNConfig(lr=0.0), ValueError,
         r"DQNConfig: lr must be > 0; got 0\.0"),
    Case("logger of an unknown type", lambda d: Trainer(logger=42), TypeError,
         r"logger must be True, False, a log directory, a SummaryWriter or an object with "
         r"log_metrics\(metrics, step\); got int"),
    Case("NaN observation from the environment",
         lambda d: trainer(d).fit(poisoned("observation"), dqn()), TrainingError,
         r"while collecting experience, in sub-env 0: FloatingPointError: Sub-env 0 returned a "
         r"non-finite observation .* at env step 30 .*An emergency checkpoint"),
    Case("infinite reward from the environment",
         lambda d: trainer(d).fit(poisoned("reward"), dqn()), TrainingError,
         r"Sub-env 0 returned a non-finite reward \(inf\) at env step 30 "),
    Case("NaN loss with on_nan_loss='raise'",
         lambda d: trainer(d, on_nan_loss="raise").fit("CartPole-v1", NanLossDQN(
             DQNConfig(hidden_sizes=[16]))), TrainingError,
         r"while training: FloatingPointError: Non-finite loss: the 'q' loss is nan at gradient "
         r"step 3\. Lower the learning rate"),
    Case("missing checkpoint", lambda d: trainer(d).fit("CartPole-v1", dqn(), ckpt_path="last"),
         FileNotFoundError, r"No checkpoint: No intact last checkpoint in .*checkpoints"),
    Case("checkpoint of another agent type",
         lambda d: _other_agent(d), ValueError,
         r"holds a SAC checkpoint; it cannot be loaded into a DQN"),
    Case("checkpoint with mismatched network shapes",
         lambda d: trainer(fitted(d), 400).fit("CartPole-v1", DQN(DQNConfig(hidden_sizes=[8])),
                                             ckpt_path="last"), ValueError,
         r"settings differ from the checkpoint's \(agent/hidden_sizes: '\[16\]' in the "
         r"checkpoint, '\[8\]' now\)"),
    Case("observation space differs from the checkpoint's",
         lambda d: trainer(fitted(d), 400).fit(EnvSpec("CartPole-v1", wrappers=(_extra_feature,)),
                                             dqn(), ckpt_path="last"), ValueError,
         r"saved on an environment with spaces .*Resume on the environment it was trained on"),
    Case("corrupt checkpoint file", lambda d: _corrupt(d), ValueError,
         r"checkpoint-200\.pt is corrupt: its SHA-256 checksum does not match"),
    Case("checkpoint that is not a checkpoint", lambda d: _foreign(d), ValueError,
         r"foreign\.pt holds objects a checkpoint must not contain \(it names "
         r"gymnasium\.spaces\.discrete\.Discrete; only tensors and plain data are loaded"),
    Case("run directory already holding a run",
         lambda d: trainer(fitted(d)).fit("CartPole-v1", dqn()), FileExistsError,
         r"already holds a run \(checkpoints, config.yaml, model_summary.txt, summary.json\)\. "
         r"Resume it with ckpt_path='last'"),
    Case("unwritable run directory", lambda d: _unwritable(d), PermissionError,
         r"Cannot write to the run directory .*Choose a run_dir you can write to"),
    Case("image observations for Dreamer's vector encoder",
         lambda d: trainer(d).fit(EnvSpec("CartPole-v1", wrappers=(_as_image,)), dreamer()),
         ValueError, r"Dreamer needs a flat Box observation space \(a vector\); got Box of "
                     r"shape \(2, 2\)\. Flatten it \(gymnasium\.wrappers\.FlattenObservation\)"),
    Case("unbounded continuous actions for Dreamer",
         lambda d: trainer(d).fit(EnvSpec("Pendulum-v1", wrappers=(_unbounded,)), dreamer()),
         ValueError, r"Dreamer scales its tanh actions to the action bounds, which must be "
                     r"finite; got Box\(-inf, inf.*gymnasium\.wrappers\.RescaleAction"),
    Case("Dreamer sequences longer than the replay ring",
         lambda d: trainer(d).fit("Pendulum-v1", dreamer(sequence_length=2_000)), ValueError,
         r"sequence_length 2000 is longer than a ring \(1000 rows per env: capacity / num_envs\);"
         r" raise the capacity \(buffer_size\) or shorten the sequences"),
    Case("imagination horizon < 1", lambda d: DreamerConfig(horizon=0), ValueError,
         r"DreamerConfig: horizon must be >= 1; got 0"),
]


def dreamer(**overrides: Any) -> Dreamer:
    settings: dict[str, Any] = dict(deter_size=16, stoch_size=4, hidden_size=16,
                                    sequence_length=8, horizon=3)
    settings.update(overrides)
    return Dreamer(DreamerConfig(**settings))


def _as_image(env: gym.Env[Any, Any]) -> gym.Env[Any, Any]:
    return gym.wrappers.ReshapeObservation(env, (2, 2))


class _Unbounded(gym.ActionWrapper[Any, Any, Any]):
    """Pendulum that claims to take any real torque."""

    def __init__(self, env: gym.Env[Any, Any]) -> None:
        super().__init__(env)
        self.action_space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)

    def action(self, action: Any) -> Any:
        return np.clip(action, -2.0, 2.0)


def _unbounded(env: gym.Env[Any, Any]) -> gym.Env[Any, Any]:
    return _Unbounded(env)


def _other_agent(run_dir: Path) -> object:
    fitted(run_dir)
    path = run_dir / "checkpoints" / "last.pt"
    state = Checkpointer.load(path)
    state["agent_class"] = "SAC"
    foreign = run_dir / "sac.pt"
    atomic_save(state, foreign)
    from rltrain.checkpoint import load_agent
    return load_agent(dqn(), foreign, "CartPole-v1")


def _extra_feature(env: gym.Env[Any, Any]) -> gym.Env[Any, Any]:
    low = np.append(env.observation_space.low, 0.0).astype(np.float32)  # type: ignore[attr-defined]
    high = np.append(env.observation_space.high, 1.0).astype(np.float32)  # type: ignore[attr-defined]
    space = gym.spaces.Box(low, high, dtype=np.float32)
    return gym.wrappers.TransformObservation(env, lambda o: np.append(o, 0.0).astype(np.float32),
                                             space)


def _corrupt(run_dir: Path) -> object:
    fitted(run_dir)
    path = run_dir / "checkpoints" / "checkpoint-200.pt"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    (run_dir / "checkpoints" / "last.pt").unlink()
    path.write_bytes(bytes(data))
    return Checkpointer.load(path)


def _foreign(run_dir: Path) -> object:
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "foreign.pt"
    torch.save({"model": gym.spaces.Discrete(3)}, path)
    return Checkpointer.load(path)


def _unwritable(run_dir: Path) -> object:
    run_dir.mkdir(parents=True, exist_ok=True)
    blocker = run_dir / "a-file"
    blocker.write_text("not a directory")
    return trainer(blocker / "run").fit("CartPole-v1", dqn())


def raised(case: Case, run_dir: Path) -> BaseException:
    with pytest.raises(case.error) as info:
        case.run(run_dir)
    return info.value


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_gets_a_clear_error(case: Case, tmp_path: Path) -> None:
    error = raised(case, tmp_path / "run")
    assert re.search(case.message, str(error)), str(error)


def test_a_bad_input_found_before_training_writes_no_run(tmp_path: Path) -> None:
    for case in CASES[:2]:
        raised(case, tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_nan_loss_stops_the_run_and_keeps_the_last_good_checkpoint(tmp_path: Path) -> None:
    run = Trainer(num_steps=400, strategy=small(), eval_interval=None, run_dir=tmp_path,
                  **QUIET, checkpoint_interval=50)
    result = run.fit("CartPole-v1", NanLossDQN(DQNConfig(hidden_sizes=[16])))
    assert result.summary.stop_reason is not None
    assert "non-finite loss: the 'q' loss is nan at gradient step 3" in result.summary.stop_reason
    last = Checkpointer.load(Checkpointer(tmp_path / "checkpoints").resolve("last"))
    assert last["progress"]["gradient_steps"] <= 2
    assert all(torch.isfinite(t).all() for t in last["agent"].values())


def test_nan_loss_with_skip_warns_and_trains_on(tmp_path: Path) -> None:
    run = Trainer(num_steps=200, strategy=small(), eval_interval=None, run_dir=tmp_path,
                  **QUIET, on_nan_loss="skip")
    with pytest.warns(UserWarning, match="Skipped an update: the 'q' loss is nan"):
        result = run.fit("CartPole-v1", NanLossDQN(DQNConfig(hidden_sizes=[16])))
    assert result.summary.env_steps == 200
    assert result.summary.stop_reason is None


def test_the_docs_table_lists_every_case(tmp_path: Path) -> None:
    table = DOCS.read_text()
    for case in CASES:
        assert f"| {case.name} |" in table, f"docs/bad_input.md lacks {case.name!r}"
