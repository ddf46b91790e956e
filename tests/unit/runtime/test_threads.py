"""Torch threads: ``num_threads="auto"`` (the default of ``Trainer()``, of a config's
``trainer:`` section and so of the Hydra app) gives small networks one thread, and the run's
console says what was chosen. Measured in docs/benchmarks.md (``python -m benchmarks.threads``).
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from conftest import QUIET, small

from rltrain import DQN, DQNConfig, Subscriber, Trainer
from rltrain.config.schema import RunConfig, compose
from rltrain.config.trainer_config import AUTO_ONE_THREAD_BELOW, TrainerConfig
from rltrain.observe import EnvStep, Metrics


class ThreadProbe(Subscriber):
    """Records torch's thread count at every env step."""

    def __init__(self) -> None:
        self.threads: set[int] = set()

    def on_env_step(self, event: EnvStep, metrics: Metrics) -> None:
        self.threads.add(torch.get_num_threads())


@contextlib.contextmanager
def torch_threads(count: int) -> Iterator[None]:
    """Torch at ``count`` threads inside (the suite runs at 1), restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def test_auto_is_the_default_everywhere() -> None:
    assert Trainer().num_threads == "auto"
    assert TrainerConfig().num_threads == "auto"
    assert RunConfig().trainer.num_threads == "auto"  # the Hydra app's structured config
    assert compose().trainer.num_threads == "auto"
    assert compose([], ["trainer.num_threads=2"]).trainer.num_threads == 2
    assert compose([], ["trainer.num_threads=null"]).trainer.num_threads is None


def test_auto_gives_a_small_network_one_thread_and_says_so(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    probe = ThreadProbe()
    with torch_threads(2):
        Trainer(num_steps=60, strategy=small(), run_dir=tmp_path, eval_interval=None,
                **{**QUIET, "enable_console": True}, callbacks=[probe]).fit(
            "CartPole-v1", DQN(DQNConfig(hidden_sizes=[16])))
        assert torch.get_num_threads() == 2  # restored after the run
    assert probe.threads == {1}
    parameters = 4 * 16 + 16 + 16 * 2 + 2  # CartPole: 4 inputs, 2 actions; the target not counted
    assert parameters < AUTO_ONE_THREAD_BELOW
    assert (f"torch threads: 1 (auto: {parameters:,} parameters run fastest on one thread)"
            in capsys.readouterr().out)


def test_auto_leaves_torch_its_threads_for_a_large_network() -> None:
    assert TrainerConfig().torch_threads(AUTO_ONE_THREAD_BELOW) == (
        None, f"auto: torch's own count for {AUTO_ONE_THREAD_BELOW:,} parameters")
    assert TrainerConfig().torch_threads(AUTO_ONE_THREAD_BELOW - 1)[0] == 1
    assert TrainerConfig(num_threads=2).torch_threads(10) == (2, "trainer.num_threads=2")
    assert TrainerConfig(num_threads=None).torch_threads(10) == (
        None, "trainer.num_threads=None: torch's own count")
    _, why = TrainerConfig().torch_threads(10, image_cnn=True)
    assert why == "auto: torch's own count for a CNN over images"


def test_an_explicit_count_and_none_are_kept(tmp_path: Path) -> None:
    probe = ThreadProbe()
    with torch_threads(1):
        Trainer(num_steps=60, strategy=small(), run_dir=tmp_path / "two", eval_interval=None,
                num_threads=2, callbacks=[probe], **QUIET).fit(
            "CartPole-v1", DQN(DQNConfig(hidden_sizes=[8])))
    assert probe.threads == {2}
    probe = ThreadProbe()
    with torch_threads(2):
        Trainer(num_steps=60, strategy=small(), run_dir=tmp_path / "none", eval_interval=None,
                num_threads=None, callbacks=[probe], **QUIET).fit(
            "CartPole-v1", DQN(DQNConfig(hidden_sizes=[8])))
    assert probe.threads == {2}


@pytest.mark.parametrize("bad", [0, -1, "four", True, 1.5])
def test_a_bad_num_threads_is_refused_naming_the_choices(bad: object) -> None:
    with pytest.raises(ValueError, match="num_threads must be a count >= 1, 'auto'"):
        TrainerConfig(num_threads=bad)  # type: ignore[arg-type]


def test_the_console_line_comes_with_the_model_summary(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        Trainer(num_steps=60, strategy=small(), run_dir=tmp_path, eval_interval=None,
                num_threads=1, enable_progress_bar=False, logger=False,
                enable_metrics_file=False).fit("CartPole-v1", DQN(DQNConfig(hidden_sizes=[8])))
    lines = out.getvalue().splitlines()
    total = next(i for i, line in enumerate(lines) if line.startswith("Total: "))
    assert lines[total + 1] == "torch threads: 1 (trainer.num_threads=1)"
