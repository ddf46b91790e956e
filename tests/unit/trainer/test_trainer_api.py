"""The Lightning-style surface of the Trainer: what the agent receives, log(), loggers,
callbacks that stop, the model summary, the run's config, checkpoints in and out, precision."""

from __future__ import annotations

import dataclasses
import inspect
import io
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import QUIET, small_strategy
from omegaconf import OmegaConf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2
from torch.utils.tensorboard import SummaryWriter

from rltrain import DQN, DQNConfig, OffPolicyConfig, OffPolicyStrategy, Subscriber, Trainer
from rltrain.agents.protocols import RolloutLearner
from rltrain.buffers.replay import ReplayBatch
from rltrain.checkpoint import Checkpointer, read_checkpoint
from rltrain.config.schema import TrainerConfig
from rltrain.observe import EnvStep, Metrics
from rltrain.observe.renderers import TqdmRenderer
from rltrain.optim import Optimization
from rltrain.types import MetricValue

ENV = "CartPole-v1"
STEPS = 1_200


#: The schedule of these tests: :func:`conftest.small_strategy`, rounds twice as far apart.
SCHEDULE = {"warmup_steps": 200, "train_interval": 100, "train_steps": 8}


class WatchfulDQN(DQN):
    """A DQN that logs a custom scalar and records what the run gave it."""

    def __init__(self) -> None:
        super().__init__(DQNConfig(hidden_sizes=[32, 32]))
        self.seen: dict[str, Any] = {}

    def training_step(self, batch: ReplayBatch, optim: Optimization) -> dict[str, MetricValue]:
        metrics = super().training_step(batch, optim)
        self.log("td_batch_reward", batch.rewards.mean())
        self.log("gradient_steps_seen", float(self.progress.gradient_steps))
        self.seen.update(trainer=self.trainer, logger=self.logger, dtype=self.dtype,
                         device=self.device, env_steps=self.progress.env_steps)
        return metrics


def tensorboard(run_dir: Path) -> EventAccumulator:
    accumulator = EventAccumulator(str(run_dir))
    accumulator.Reload()
    return accumulator


def tensorboard_hparams(run_dir: Path) -> dict[str, Any]:
    for raw in tensorboard(run_dir).PluginTagToContent("hparams").values():
        data = plugin_data_pb2.HParamsPluginData.FromString(raw)
        if data.HasField("session_start_info"):
            return dict(data.session_start_info.hparams)
    return {}


@pytest.fixture(scope="module")
def watched(tmp_path_factory: pytest.TempPathFactory) -> tuple[Trainer, WatchfulDQN, Path]:
    run_dir = tmp_path_factory.mktemp("watched")
    trainer = Trainer(num_steps=STEPS, strategy=small_strategy(**SCHEDULE), run_dir=run_dir,
                      eval_interval=600, eval_episodes=3, log_interval=200,
                      enable_progress_bar=False, enable_console=False)
    agent = WatchfulDQN()
    trainer.fit(ENV, agent)
    return trainer, agent, run_dir


def test_the_agent_receives_trainer_logger_dtype_device_and_live_counters(
    watched: tuple[Trainer, WatchfulDQN, Path],
) -> None:
    trainer, agent, _ = watched
    assert agent.seen["trainer"] is trainer
    assert isinstance(agent.seen["logger"], SummaryWriter)
    assert agent.seen["dtype"] == torch.float32
    assert agent.seen["device"] == torch.device("cpu")
    assert agent.seen["env_steps"] == STEPS  # the last round trains at the last env step
    assert agent.logger is None  # released with the closed writer when fit returns
    assert agent.trainer is trainer


def test_a_value_logged_by_the_agent_is_read_back_from_tensorboard(
    watched: tuple[Trainer, WatchfulDQN, Path],
) -> None:
    _, _, run_dir = watched
    events = tensorboard(run_dir)
    assert "train/td_batch_reward" in events.Tags()["scalars"]
    rewards = events.Scalars("train/td_batch_reward")
    assert [e.step for e in rewards] == list(range(400, STEPS + 1, 200))
    assert all(v.value == pytest.approx(1.0) for v in rewards)  # CartPole pays 1 per step
    seen = events.Scalars("train/gradient_steps_seen")
    # a 100-step window mean of the counter: it grows with the run
    assert seen[-1].value > seen[0].value > 0


def test_a_value_logged_by_the_agent_reaches_the_console_and_metrics_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    trainer = Trainer(num_steps=400, strategy=small_strategy(**SCHEDULE), run_dir=tmp_path,
                      eval_interval=None, logger=False, enable_progress_bar=False,
                      console_interval=0)
    trainer.fit(ENV, WatchfulDQN())
    assert "td_batch_reward=1" in capsys.readouterr().out
    assert '"train/td_batch_reward": 1.0' in (tmp_path / "metrics.jsonl").read_text()


def test_the_model_summary_is_written_with_each_networks_parameter_count(
    watched: tuple[Trainer, WatchfulDQN, Path],
) -> None:
    _, agent, run_dir = watched
    text = (run_dir / "model_summary.txt").read_text()
    params = sum(p.numel() for p in agent.q_network.parameters())
    rows = {line.split()[0]: line.split() for line in text.splitlines()[2:-1]}
    assert rows["q_network"][2] == f"{params:,}" and rows["q_network"][3] == f"{params:,}"
    assert rows["target_network"][2] == f"{params:,}" and rows["target_network"][3] == "0"
    assert text.splitlines()[-1].startswith(f"Total: {2 * params:,} parameters ({params:,} "
                                            "trainable)")


def test_the_run_config_is_saved_in_the_run_dir_every_checkpoint_and_tensorboard(
    watched: tuple[Trainer, WatchfulDQN, Path],
) -> None:
    trainer, _, run_dir = watched
    saved = OmegaConf.to_container(OmegaConf.load(run_dir / "config.yaml"))
    assert isinstance(saved, dict)
    assert saved["trainer"]["num_steps"] == STEPS and saved["trainer"]["eval_episodes"] == 3
    assert saved["trainer"]["run_dir"] == str(run_dir)
    assert saved["env"] == {"id": ENV, "kwargs": {}}
    assert saved["strategy"]["name"] == "off_policy" and saved["strategy"]["train_steps"] == 8
    # WatchfulDQN is not a registered agent, and takes no arguments: its import path is enough
    assert saved["agent"] == {"_target_": f"{WatchfulDQN.__module__}.WatchfulDQN"}
    checkpoints = Checkpointer(run_dir / "checkpoints")
    for which in ("last", "best"):
        assert read_checkpoint(checkpoints.resolve(which))["config"] == saved
    hparams = tensorboard_hparams(run_dir)
    assert hparams["trainer.num_steps"].number_value == STEPS
    assert hparams["strategy.train_steps"].number_value == 8
    # the run's hparams too (the config names WatchfulDQN by import path alone)
    assert hparams["agent.hidden_sizes"].string_value == "[32, 32]"
    assert trainer.last_run_dir == run_dir


def test_a_given_config_keeps_its_own_keys_and_gets_the_true_sections(tmp_path: Path) -> None:
    given = {"project": {"owner": "me"}, "trainer": {"num_steps": 1}, "agent": {"name": "dqn"}}
    trainer = Trainer(num_steps=300, strategy=small_strategy(**SCHEDULE), run_dir=tmp_path,
                      eval_interval=None, config=OmegaConf.create(given), **QUIET)
    trainer.fit(ENV, DQN(DQNConfig(hidden_sizes=[16], lr=5e-4)))
    saved = OmegaConf.load(tmp_path / "config.yaml")
    assert saved.project.owner == "me"
    assert saved.trainer.num_steps == 300  # what the run used, not what was given
    assert saved.agent.lr == 5e-4 and saved.agent.hidden_sizes == [16]


def test_trainer_config_fields_and_defaults_match_the_trainer_arguments() -> None:
    parameters = inspect.signature(Trainer).parameters
    for field in dataclasses.fields(TrainerConfig):
        assert field.name in parameters, field.name
        assert parameters[field.name].default == field.default, field.name
    assert set(Trainer().settings()) == {f.name for f in dataclasses.fields(TrainerConfig)}


def test_each_setting_is_declared_once_in_trainer_config() -> None:
    # The Trainer's arguments are TrainerConfig's fields (inherited, not written again) plus
    # the objects a config file cannot hold: a new setting is one field in one place.
    from rltrain.trainer.settings import TrainerSettings

    plain = {f.name for f in dataclasses.fields(TrainerConfig)}
    assert issubclass(Trainer, TrainerConfig)
    assert not plain & set(vars(TrainerSettings).get("__annotations__", {}))
    assert "__init__" not in vars(Trainer)  # the dataclass's, made from the fields
    assert set(inspect.signature(Trainer).parameters) == plain | {
        "strategy", "seed", "callbacks", "config", "interrupter", "checkpoint_io"}


def test_a_summary_writer_logger_receives_the_run_and_stays_open(tmp_path: Path) -> None:
    writer = SummaryWriter(log_dir=str(tmp_path / "tb"))
    trainer = Trainer(num_steps=400, strategy=small_strategy(**SCHEDULE), run_dir=tmp_path / "run",
                      eval_interval=None, logger=writer, log_interval=200,
                      enable_progress_bar=False, enable_console=False)
    trainer.fit(ENV, DQN(DQNConfig(hidden_sizes=[16])))
    writer.add_scalar("mine/after_fit", 1.0, 0)  # still usable: the trainer did not close it
    writer.close()
    assert not list((tmp_path / "run").glob("events.out.tfevents.*"))
    tags = tensorboard(tmp_path / "tb").Tags()["scalars"]
    assert "rollout/episode_return" in tags and "train/loss" in tags and "mine/after_fit" in tags


def test_a_lightning_style_logger_object_receives_metrics_and_hyperparameters(
    tmp_path: Path,
) -> None:
    class ListLogger:
        def __init__(self) -> None:
            self.rows: list[tuple[int | None, dict[str, float]]] = []
            self.params: dict[str, Any] = {}
            self.status = ""

        def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
            self.rows.append((step, dict(metrics)))

        def log_hyperparams(self, params: dict[str, Any]) -> None:
            self.params.update(params)

        def finalize(self, status: str) -> None:
            self.status = status

    logger = ListLogger()
    trainer = Trainer(num_steps=600, strategy=small_strategy(**SCHEDULE), run_dir=tmp_path,
                      eval_interval=300, eval_episodes=2, logger=logger, log_interval=200,
                      enable_progress_bar=False, enable_console=False)
    agent = DQN(DQNConfig(hidden_sizes=[16]))
    trainer.fit(ENV, agent)
    assert [step for step, row in logger.rows if "rollout/episode_return" in row] == [200, 400,
                                                                                       600]
    # the first round trains at 200, after that step's row was written
    assert [step for step, row in logger.rows if "train/loss" in row] == [400, 600]
    assert [step for step, row in logger.rows if "eval/return_mean" in row] == [300, 600]
    assert logger.params["agent.lr"] == pytest.approx(DQNConfig().lr)
    assert "agent/lr" not in logger.params
    assert logger.params["trainer.num_steps"] == 600
    assert logger.status == "success"
    assert not list(tmp_path.glob("events.out.tfevents.*"))  # one object: that logger alone


def test_a_bad_logger_is_refused_before_anything_runs(tmp_path: Path) -> None:
    with pytest.raises(TypeError,
                       match="logger must be a list of loggers, one logger, True or False"):
        Trainer(logger=42, run_dir=tmp_path)  # type: ignore[arg-type]


def test_a_callback_can_stop_the_run_and_the_stop_is_saved(tmp_path: Path) -> None:
    class StopAt(Subscriber):
        def on_env_step(self, event: EnvStep, metrics: Metrics) -> None:
            if event.env_steps == 500:
                self.request_stop("enough at 500")

    trainer = Trainer(num_steps=2_000, strategy=small_strategy(**SCHEDULE), run_dir=tmp_path,
                      eval_interval=None, callbacks=[StopAt()], **QUIET)
    summary = trainer.fit(ENV, DQN(DQNConfig(hidden_sizes=[16]))).summary
    assert summary.env_steps == 500 and summary.stop_reason == "enough at 500"
    last = read_checkpoint(Checkpointer(tmp_path / "checkpoints").resolve("last"))
    assert last["progress"]["env_steps"] == 500


def test_request_stop_outside_a_run_says_how_to_attach() -> None:
    with pytest.raises(RuntimeError, match="Trainer\\(callbacks="):
        Subscriber().request_stop("now")


def test_evaluate_best_reproduces_the_best_evaluation_and_save_load_round_trip(
    watched: tuple[Trainer, WatchfulDQN, Path], tmp_path: Path,
) -> None:
    trainer, agent, run_dir = watched
    best = Checkpointer(run_dir / "checkpoints").manifest().best
    assert best is not None
    fresh = WatchfulDQN()
    metrics = trainer.evaluate(ENV, fresh, ckpt_path="best")
    assert metrics["eval/episodes"] == 3.0  # the trainer's eval_episodes
    assert metrics["eval/return_mean"] == pytest.approx(best.eval_return)

    path = trainer.save_checkpoint(tmp_path / "weights.pt")
    saved = read_checkpoint(path)
    assert saved["progress"]["env_steps"] == STEPS and "optimization" not in saved
    assert saved["config"]["trainer"]["num_steps"] == STEPS
    loaded = WatchfulDQN()
    trainer.load_checkpoint(path, agent=loaded, env=ENV)
    for name, value in agent.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], value), name
    assert trainer.evaluate(ENV, loaded) == trainer.evaluate(ENV, agent)


def test_save_checkpoint_before_fit_says_to_fit_first() -> None:
    with pytest.raises(RuntimeError, match="call fit\\(\\) first"):
        Trainer().save_checkpoint("nowhere.pt")


def test_num_threads_applies_during_fit_and_is_restored(tmp_path: Path) -> None:
    class ThreadProbe(Subscriber):
        def __init__(self) -> None:
            self.threads: list[int] = []

        def on_env_step(self, event: EnvStep, metrics: Metrics) -> None:
            self.threads.append(torch.get_num_threads())

    before = torch.get_num_threads()
    probe = ThreadProbe()
    Trainer(num_steps=50, strategy=small_strategy(**SCHEDULE), run_dir=tmp_path, eval_interval=None,
            num_threads=2, callbacks=[probe], **QUIET).fit(ENV, DQN(DQNConfig(hidden_sizes=[8])))
    assert set(probe.threads) == {2}
    assert torch.get_num_threads() == before


def test_keep_best_false_and_a_checkpoint_dir_of_ones_own(tmp_path: Path) -> None:
    trainer = Trainer(num_steps=400, strategy=small_strategy(**SCHEDULE), run_dir=tmp_path / "run",
                      eval_interval=200, eval_episodes=2, keep_best=False,
                      checkpoint_dir=tmp_path / "ckpts", **QUIET)
    trainer.fit(ENV, DQN(DQNConfig(hidden_sizes=[16])))
    assert not (tmp_path / "run" / "checkpoints").exists()
    assert (tmp_path / "ckpts" / "last.pt").is_file()
    assert not list((tmp_path / "ckpts").glob("best*"))
    assert trainer.evaluate(ENV, DQN(DQNConfig(hidden_sizes=[16])),
                            ckpt_path="last")["eval/episodes"] == 2.0


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_mixed_precision_dqn_trains_and_its_checkpoint_records_the_dtype(
    tmp_path: Path, dtype: str,
) -> None:
    trainer = Trainer(num_steps=600, strategy=small_strategy(**SCHEDULE), run_dir=tmp_path,
                      eval_interval=None, dtype=dtype, **QUIET)
    agent = DQN(DQNConfig(hidden_sizes=[32]))
    summary = trainer.fit(ENV, agent).summary
    assert summary.gradient_steps == 40  # rounds of 8 at 200, 300, ..., 600
    assert all(p.dtype == torch.float32 and torch.isfinite(p).all() for p in agent.parameters())
    assert summary.final_metrics["train/loss"] > 0
    saved = read_checkpoint(tmp_path / "checkpoints" / "last.pt")
    assert saved["hparams"]["optim/dtype"] == dtype
    # a float32 run cannot continue it: the precision changes what each step computes
    with pytest.raises(ValueError, match=f"optim/dtype: '{dtype}' in the checkpoint"):
        Trainer(num_steps=800, strategy=small_strategy(**SCHEDULE), run_dir=tmp_path,
                eval_interval=None, **QUIET).fit(ENV, DQN(DQNConfig(hidden_sizes=[32])),
                                                 ckpt_path="last")


def test_an_unknown_dtype_names_the_choices() -> None:
    with pytest.raises(ValueError, match=r"dtype must be one of \['float32', 'bfloat16'"):
        Trainer(dtype="float8")


def test_a_value_logged_by_the_agent_reaches_the_progress_bar(tmp_path: Path) -> None:
    bar = io.StringIO()
    Trainer(num_steps=400, strategy=small_strategy(**SCHEDULE), run_dir=tmp_path,
            eval_interval=None, callbacks=[TqdmRenderer(file=bar, refresh_seconds=0)],
            **QUIET).fit(ENV, WatchfulDQN())
    assert "td_batch_reward=1" in bar.getvalue()


def test_a_weights_only_checkpoint_cannot_be_resumed_and_nothing_is_written(
    watched: tuple[Trainer, WatchfulDQN, Path], tmp_path: Path,
) -> None:
    trainer, _, _ = watched
    weights = trainer.save_checkpoint(tmp_path / "weights.pt")
    run_dir = tmp_path / "run"
    with pytest.raises(ValueError, match="weights only"):
        Trainer(num_steps=STEPS + 200, strategy=small_strategy(**SCHEDULE), run_dir=run_dir,
                **QUIET).fit(ENV, WatchfulDQN(), ckpt_path=weights)
    assert not run_dir.exists()


def test_cuda_without_a_gpu_is_refused_with_the_fix() -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(ValueError, match=r"sees no CUDA GPU\. Train on device='cpu'"):
        Trainer(device="cuda")


def test_a_logger_object_is_finalized_as_failed_when_the_run_raises(tmp_path: Path) -> None:
    class Recorder:
        status = ""

        def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
            pass

        def finalize(self, status: str) -> None:
            self.status = status

    class Boom(Subscriber):
        def on_env_step(self, event: EnvStep, metrics: Metrics) -> None:
            if event.env_steps == 50:
                raise RuntimeError("boom")

    logger = Recorder()
    trainer = Trainer(num_steps=200, strategy=small_strategy(**SCHEDULE), run_dir=tmp_path,
                      eval_interval=None, logger=logger, callbacks=[Boom()],
                      enable_progress_bar=False, enable_console=False)
    with pytest.raises(RuntimeError, match="boom"):
        trainer.fit(ENV, DQN(DQNConfig(hidden_sizes=[8])))
    assert logger.status == "failed"


@pytest.mark.slow  # a whole run in a fresh interpreter
def test_a_run_without_a_tensorboard_logger_does_not_import_tensorboard(tmp_path: Path) -> None:
    code = (
        "import sys, torch\n"
        "from rltrain import DQN, DQNConfig, Trainer\n"
        f"Trainer(num_steps=100, eval_interval=None, run_dir={str(tmp_path)!r}, logger=False,\n"
        "        enable_progress_bar=False, enable_console=False).fit(\n"
        "    'CartPole-v1', DQN(DQNConfig(hidden_sizes=[8])))\n"
        "print('torch.utils.tensorboard' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "False"


def test_without_a_strategy_each_agent_gets_its_own_default_schedule(tmp_path: Path) -> None:
    from rltrain.agents.dreamer import Dreamer, DreamerConfig

    trainer = Trainer(num_steps=50, eval_interval=None, run_dir=tmp_path / "dreamer", seed=3,
                      **QUIET)
    trainer.fit("Pendulum-v1", Dreamer(DreamerConfig(deter_size=8, stoch_size=4,
                                                     hidden_size=8, sequence_length=4)))
    assert isinstance(trainer.strategy, OffPolicyStrategy)
    assert trainer.strategy.config == OffPolicyConfig(seed=3, batch_size=16, warmup_steps=2_000,
                                                      train_interval=50, train_steps=10)
    trainer.run_dir = tmp_path / "dqn"
    trainer.fit(ENV, DQN(DQNConfig(hidden_sizes=[8])))
    assert trainer.strategy.config == OffPolicyConfig(  # DQN's: Stable-Baselines3's schedule
        seed=3, batch_size=32, warmup_steps=100, train_interval=4, train_steps=1,
        buffer_size=1_000_000)


def test_a_strategy_of_a_kind_the_agent_does_not_train_with_is_refused(tmp_path: Path) -> None:
    class Rollouts(OffPolicyStrategy):  # a loop whose agents learn from rollouts
        kind = "on_policy"
        learner = RolloutLearner

    trainer = Trainer(num_steps=50, strategy=Rollouts(), run_dir=tmp_path / "run", **QUIET)
    with pytest.raises(ValueError, match=r"DQN trains with off_policy strategies, not on_policy "
                                         r"\(Rollouts\)\. Leave strategy out"):
        trainer.fit(ENV, DQN(DQNConfig(hidden_sizes=[8])))
    assert not (tmp_path / "run").exists()
