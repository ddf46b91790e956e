"""Settings that used to hang, exhaust memory, or end a run as if it had succeeded (audit issue
26): non-finite numbers and non-bools in every config, a refused loss in the last update,
networks and agreement rows larger than the memory, a divisor search over a huge batch size,
and what a second Ctrl-C leaves. Real runs, real `rltrain` processes (their exit statuses),
real torchrun ranks."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import pytest
import torch
from conftest import QUIET, TESTS, NanLossDQN, dqn, rltrain, shape_shifter, trainer

from rltrain import PPO, DQNConfig, OnPolicyStrategy, PPOConfig, Trainer
from rltrain.agents.dreamer import Dreamer, DreamerConfig
from rltrain.config.trainer_config import TrainerConfig
from rltrain.errors import TrainingError
from rltrain.runtime.distributed import TORCHRUN_VARIABLES
from rltrain.settings.checks import field_kind
from rltrain.settings.loops import OnPolicyConfig, _divisor_near
from rltrain.settings.registry import AGENTS, STRATEGIES
from rltrain.types import Progress

#: Every config dataclass a run is made of, with the name its errors start with.
CONFIGS: list[tuple[type, str]] = [
    *((entry.config, entry.config.__name__) for entry in (*AGENTS.values(),
                                                          *STRATEGIES.values())),
    (TrainerConfig, "trainer"),
]
#: A PPO on CartPole whose value loss overflows float32 (1e38 x ~14) in its first and only
#: update: finite settings, an infinite loss, refused in the run's last update.
OVERFLOWING_PPO = ["ppo_cartpole", "trainer.num_steps=256", "agent.vf_coef=1e38",
                   "trainer.enable_progress_bar=false", "trainer.logger=false"]


def fields_of_kind(config: type, kind: str) -> list[str]:
    """The fields of ``config`` declared ``float`` (or ``float | None``), or ``bool``."""
    return [f.name for f in dataclasses.fields(config) if field_kind(f.type)[0] == kind]


# Non-finite numbers and non-bools, in every config ---------------------------------------


@pytest.mark.parametrize(("config", "owner"), CONFIGS, ids=[o for _, o in CONFIGS])
def test_every_float_setting_refuses_inf_and_nan_naming_the_setting(config: type,
                                                                    owner: str) -> None:
    for name in fields_of_kind(config, "float"):
        for bad in (float("inf"), float("-inf"), float("nan")):
            # the config's own range check answers first where it has one, else the shared
            # one; some of the trainer's own (shared with RLComponents) name no section
            prefix = f"({owner}: )?" if owner == "trainer" else f"{owner}: "
            with pytest.raises(ValueError, match=rf"^{prefix}(.* )?{name} "):
                config(**{name: bad})


@pytest.mark.parametrize(("config", "owner"), CONFIGS, ids=[o for _, o in CONFIGS])
def test_every_bool_setting_refuses_what_is_not_a_bool(config: type, owner: str) -> None:
    for name in fields_of_kind(config, "bool"):
        with pytest.raises(ValueError, match=rf"^{owner}: {name} must be True or False "
                                             r".*; got 2\.$"):
            config(**{name: 2})


def test_the_float_settings_named_by_the_audit_refuse_inf() -> None:
    configs = {config.__name__: config for config, _ in CONFIGS}
    for name, setting in [("PPOConfig", "lr"), ("PPOConfig", "ent_coef"),
                          ("PPOConfig", "vf_coef"), ("PPOConfig", "log_std_init"),
                          ("PPOConfig", "max_grad_norm"), ("PPOConfig", "gamma"),
                          ("SACConfig", "alpha"), ("SACConfig", "alpha_init"),
                          ("SACConfig", "target_entropy"), ("SACConfig", "tau"),
                          ("DQNConfig", "tau"), ("DreamerConfig", "free_nats"),
                          ("TrainerConfig", "gradient_clip_val"),
                          ("TrainerConfig", "console_interval")]:
        config = configs[name]
        assert setting in fields_of_kind(config, "float"), (name, setting)
        with pytest.raises(ValueError, match=setting):
            config(**{setting: float("inf")})


def test_an_infinite_setting_on_the_command_line_is_refused_before_anything_is_written(
        tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    done = rltrain("fit", "ppo_cartpole", "agent.ent_coef=inf", f"trainer.run_dir={run_dir}",
                   cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "PPOConfig: ent_coef must be a finite number, not infinite or NaN; got inf." \
        in done.stderr
    assert not run_dir.exists()


def test_a_log_std_init_whose_exp_overflows_is_refused() -> None:
    with pytest.raises(ValueError, match=r"^PPOConfig: log_std_init must be in \[-20, 20\] "
                                         r".*got 1000"):
        PPOConfig(log_std_init=1000.0)


def test_a_distribution_refusing_its_parameters_names_the_settings() -> None:
    env = gym.make("Pendulum-v1")
    agent = Dreamer(DreamerConfig(hidden_size=16, deter_size=16, stoch_size=4))
    agent.setup(observation_space=env.observation_space, action_space=env.action_space,
                device=torch.device("cpu"), progress=Progress())
    with torch.no_grad():  # what a diverged gradient step leaves
        for parameter in agent.actor.parameters():
            parameter.fill_(float("nan"))
    policy = agent.policy(torch.device("cpu"))
    with pytest.raises(FloatingPointError) as caught:
        policy.act(torch.zeros(1, 3), policy.initial_state(1), False)
    message = str(caught.value)
    assert message.startswith("The action distribution of Dreamer's actor refused its "
                              "parameters (Expected parameter loc"), message
    assert "agent.actor_lr" in message and "trainer.gradient_clip_val" in message


# A refused loss: always a reason, a failed command, and a directory that can be taken --------


def test_a_refused_loss_in_the_last_update_is_the_runs_stop_reason(tmp_path: Path) -> None:
    strategy = OnPolicyStrategy(OnPolicyConfig(n_steps=128, batch_size=64, update_epochs=1))
    result = Trainer(num_steps=128, run_dir=tmp_path, eval_interval=None, **QUIET,
                     strategy=strategy).fit("CartPole-v1", PPO(PPOConfig(vf_coef=1e38)))
    reason = result.summary.stop_reason
    assert result.summary.env_steps == 128  # all its steps: the reason used to be dropped
    assert reason is not None and reason.startswith(
        "non-finite loss: the 'ppo' loss is inf at gradient step 1; the update was skipped "
        "and the run stopped, writing no checkpoint after it."), reason
    assert reason.endswith("There is no earlier checkpoint. Nothing can be resumed: fix the "
                           "cause and start the run again (rltrain fit without --resume)."), reason
    assert json.loads((tmp_path / "summary.json").read_text())["stop_reason"] == reason
    assert not list((tmp_path / "checkpoints").glob("*.pt"))


def test_a_refused_loss_after_a_checkpoint_names_it_and_how_to_resume(tmp_path: Path) -> None:
    result = trainer(tmp_path, 400, checkpoint_interval=50).fit(
        "CartPole-v1", NanLossDQN(DQNConfig(hidden_sizes=[16])))
    last = tmp_path / "checkpoints" / "checkpoint-50.pt"
    assert result.summary.stop_reason is not None
    assert result.summary.stop_reason.endswith(
        f"The last checkpoint, {last}, is intact. Fix the cause, then resume with "
        "ckpt_path='last' (rltrain fit --resume RUN_DIR)."), result.summary.stop_reason


@pytest.mark.slow
def test_a_refused_loss_fails_the_command_and_a_new_run_takes_its_directory(
        tmp_path: Path) -> None:
    """Needs rltrain/cli/app.py to exit 3 on a refused loss, and rltrain/trainer/run_dir.py to
    let a new run take a directory whose run a refused loss stopped before its first save
    (see the report of this change)."""
    run_dir = tmp_path / "run"
    failed = rltrain("fit", *OVERFLOWING_PPO, f"trainer.run_dir={run_dir}", cwd=tmp_path)
    assert failed.returncode == 3, failed.stdout + failed.stderr
    assert "stopped at 256 env steps: non-finite loss: the 'ppo' loss is inf" in failed.stdout
    assert "rltrain: training stopped: non-finite loss: the 'ppo' loss is inf" in failed.stderr
    assert json.loads((run_dir / "summary.json").read_text())["stop_reason"].startswith(
        "non-finite loss: ")
    again = rltrain("fit", *OVERFLOWING_PPO[:2], "trainer.enable_progress_bar=false",
                    "trainer.logger=false", f"trainer.run_dir={run_dir}", cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr  # no --overwrite needed
    assert json.loads((run_dir / "summary.json").read_text())["stop_reason"] is None
    assert (run_dir / "checkpoints" / "last.pt").exists()


def test_an_observation_of_another_shape_mid_run_names_both_shapes(tmp_path: Path) -> None:
    """Needs the shape check of rltrain/envs/make.py's sub-envs (see the report of this change)."""
    with pytest.raises(TrainingError) as caught:
        trainer(tmp_path, 100).fit(shape_shifter, dqn())
    assert ("in sub-env 0: sub-env 0 returned from step() an observation of shape (5,), but "
            "its observation space Box(-1.0, 1.0, (3,), float32) has shape (3,). Return "
            "observations of the declared shape, or declare the shape they have.") \
        in str(caught.value), str(caught.value)


# Sizes that exhausted memory or time -------------------------------------------------------


@pytest.mark.slow  # a process (3 s); in-process: the parametrized case below
def test_huge_hidden_sizes_are_refused_before_anything_is_allocated_or_written(
        tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    done = rltrain("fit", "ppo_cartpole", "agent.hidden_sizes=[10000000000]",
                   f"trainer.run_dir={run_dir}", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(
        "rltrain: error: Training PPO's networks of hidden_sizes [10000000000] "
        "(130,000,000,003 parameters, with their gradients and Adam's two moments) needs "
        "2080.00 GB; "), done.stderr
    assert done.stderr.rstrip().endswith("of memory is available. Lower the agent's "
                                         "hidden_sizes."), done.stderr
    assert not run_dir.exists()


def test_every_agent_refuses_networks_larger_than_the_memory() -> None:
    env = gym.make("Pendulum-v1")
    for agent, what in [
        (AGENTS["sac"].cls(AGENTS["sac"].config(hidden_sizes=[10**6, 10**6])),
         "a network of layer widths 3, 1,000,000, 1,000,000, 2"),
        (Dreamer(DreamerConfig(deter_size=10**7)),
         "Dreamer's recurrent model of deter_size 10,000,000"),
    ]:
        with pytest.raises(MemoryError, match=f"^Training {what} "):
            agent.setup(observation_space=env.observation_space,
                        action_space=env.action_space, device=torch.device("cpu"),
                        progress=Progress())


@pytest.mark.slow  # a process (3 s); in-process: the divisor hint's test
def test_a_huge_on_policy_batch_size_is_refused_at_once(tmp_path: Path) -> None:
    started = time.monotonic()
    done = rltrain("fit", "ppo_cartpole", "strategy.batch_size=1000000000000", cwd=tmp_path,
                   timeout=60)
    assert done.returncode == 2, done.stderr
    assert "batch_size (1000000000000) must divide the rollout" in done.stderr
    assert "e.g. batch_size=256." in done.stderr, done.stderr  # the rollout itself
    assert time.monotonic() - started < 30


def test_the_divisor_hint_is_the_nearest_divisor_and_fast() -> None:
    for n in (1, 2, 12, 97, 360, 2048, 5000):
        divisors = [d for d in range(1, n + 1) if n % d == 0]  # by brute force, once per n
        for target in range(1, 2 * n + 2):
            nearest = min(divisors, key=lambda d: (abs(d - target), d))
            assert _divisor_near(n, target) == nearest, (n, target)
    started = time.monotonic()
    assert _divisor_near(2**40 - 1, 10**12) == 2**40 - 1
    assert _divisor_near(2**61 - 1, 1000) in (1, 2**61 - 1)  # a prime: only those divide it
    assert time.monotonic() - started < 5
    with pytest.raises(ValueError, match=r"e\.g\. batch_size=2048\.$"):
        OnPolicyConfig(batch_size=10**12)


ONE_STEP_ENV = '''
import gymnasium as gym
import numpy as np


class OneStep(gym.Env):
    """Every episode is one step long: each step ends an episode."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return np.zeros(2, np.float32), 1.0, True, False, {}
'''


@pytest.mark.slow
@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch without distributed")
def test_a_huge_sync_interval_sizes_the_agreement_by_the_episodes_there_are(
        tmp_path: Path) -> None:
    (tmp_path / "one_step.py").write_text(ONE_STEP_ENV)
    steps = 2 * 1100  # each rank ends 1,100 episodes before the end: two all-gathers
    env = {k: v for k, v in os.environ.items() if k not in TORCHRUN_VARIABLES}
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
         "-m", "rltrain.cli", "fit", "agent.name=dqn", "env._target_=one_step.OneStep",
         "agent.hidden_sizes=[8]", f"strategy.warmup_steps={steps}",
         f"trainer.num_steps={steps}", "trainer.sync_interval=1000000000000",
         "trainer.eval_interval=null", "trainer.enable_progress_bar=false",
         "trainer.logger=false", f"trainer.run_dir={tmp_path / 'run'}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
        env={**env, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["env_steps"] == steps
    assert summary["episodes"] == steps  # every rank's episodes, none dropped


# A second Ctrl-C ---------------------------------------------------------------------------


def start_hanging_fit(tmp_path: Path, *overrides: str) -> tuple[subprocess.Popen[str], Path]:
    """`rltrain fit` of DQN on tests/scenarios/test_hung_envs.py's HangingEnv, which hangs in its
    201st
    step (in the random warm-up); returns the process and the file the env writes then."""
    marker = tmp_path / "hanging"
    command = [sys.executable, "-m", "rltrain.cli", "fit",
               "env._target_=test_hung_envs.HangingEnv", "env.kwargs.hang_after=200",
               f"env.kwargs.marker={marker}", "agent.hidden_sizes=[16]",
               f"trainer.run_dir={tmp_path / 'run'}", "trainer.eval_interval=null",
               "trainer.logger=false", "trainer.enable_progress_bar=false", *overrides]
    with (tmp_path / "out.txt").open("w") as out:
        process = subprocess.Popen(  # the env's module imports tests/conftest.py
            command, cwd=TESTS / "scenarios", stdout=out, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(TESTS)})
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert process.poll() is None, (tmp_path / "out.txt").read_text()
        if time.monotonic() > deadline:
            process.kill()
            pytest.fail("the env never started to hang")
        time.sleep(0.05)
    time.sleep(0.2)  # inside the hung step
    return process, marker


def two_sigints(process: subprocess.Popen[str], tmp_path: Path) -> str:
    process.send_signal(signal.SIGINT)
    time.sleep(0.3)
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        pytest.fail((tmp_path / "out.txt").read_text())
    return (tmp_path / "out.txt").read_text()


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SIGALRM-interrupted steps")
@pytest.mark.parametrize("saved", [False, True], ids=["no checkpoint yet", "a checkpoint"])
def test_a_second_ctrl_c_says_what_is_really_kept(tmp_path: Path, saved: bool) -> None:
    """Needs rltrain/cli/app.py to print the message fit gives the KeyboardInterrupt (see the
    report of this change)."""
    process, _ = start_hanging_fit(
        tmp_path, *(["trainer.checkpoint_interval=100"] if saved else []))
    text = two_sigints(process, tmp_path)
    assert process.returncode == 130, text
    assert "the last checkpoint is kept" not in text, text
    if saved:
        last = tmp_path / "run" / "checkpoints" / "checkpoint-200.pt"
        assert (f"rltrain: aborted (a second Ctrl-C); the last checkpoint, {last}, is kept: "
                f"resume with rltrain fit --resume {tmp_path / 'run'}.") in text, text
    else:
        assert ("rltrain: aborted (a second Ctrl-C); no checkpoint was written yet, so nothing "
                "can be resumed: start the run again (rltrain fit without --resume).") in text
        assert not list((tmp_path / "run").glob("checkpoints/*.pt"))
