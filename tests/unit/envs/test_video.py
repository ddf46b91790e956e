"""Videos of evaluation episodes (issue 16, item 4): ``Trainer(video_interval=N)`` during fit
and ``rltrain evaluate RUN --video DIR``, each file one episode of evaluation sub-env 0, read
back frame by frame."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest
import torch

pytest.importorskip("moviepy", reason="the video extra is not installed")
pytest.importorskip("imageio_ffmpeg", reason="the video extra is not installed")

import imageio.v2 as imageio

from rltrain import DQN, Trainer
from rltrain.config.trainer_config import TrainerConfig
from rltrain.envs.evaluator import Evaluator


def frames(path: Path) -> int:
    """The frames of the video at ``path``, counted by decoding them."""
    reader = imageio.get_reader(str(path), format="ffmpeg")
    try:
        return sum(1 for _ in reader)
    finally:
        reader.close()


def evaluations(run_dir: Path) -> dict[int, list[int]]:
    """Episode lengths of each evaluation of a run, by env steps (from metrics.jsonl)."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {row["env_steps"]: row["lengths"] for row in rows if row["event"] == "evaluation"}


@pytest.fixture(scope="module")
def fitted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Trainer, DQN, Path]:
    run_dir = tmp_path_factory.mktemp("video") / "run"
    trainer = Trainer(num_steps=400, eval_interval=100, eval_episodes=4, video_interval=2,
                      run_dir=run_dir, enable_progress_bar=False, enable_console=False,
                      logger=False, num_threads=1)
    agent = DQN()
    trainer.fit("CartPole-v1", agent)
    return trainer, agent, run_dir


def test_fit_records_every_nth_evaluation_one_file_per_episode_of_sub_env_0(
        fitted: tuple[Trainer, DQN, Path]) -> None:
    _, _, run_dir = fitted
    videos = sorted(p.name for p in (run_dir / "videos").iterdir())
    # 4 evaluations (100 .. 400 env steps), the 2nd and 4th recorded; 4 episodes on 4
    # sub-envs: sub-env 0 runs one of them.
    assert videos == ["eval-200-episode-0.mp4", "eval-400-episode-0.mp4"]
    lengths = evaluations(run_dir)
    for name in videos:
        env_steps = int(name.split("-")[1])
        # the reset frame, then one per env step of the episode
        assert frames(run_dir / "videos" / name) - 1 in lengths[env_steps]


def test_each_recorded_episode_is_its_own_file_with_every_frame(tmp_path: Path) -> None:
    agent = DQN()
    Trainer(num_steps=1, eval_interval=None, enable_progress_bar=False, enable_console=False,
            logger=False, enable_metrics_file=False, run_dir=tmp_path / "run",
            num_threads=1).fit("CartPole-v1", agent)
    # 6 episodes on 2 sub-envs, each cut at 17 env steps: sub-env 0 runs 3, recorded apart
    evaluator = Evaluator("CartPole-v1", episodes=6, seed=0, device=torch.device("cpu"),
                          num_envs=2, max_episode_steps=17, video_dir=tmp_path / "videos")
    try:
        from rltrain.observe.processor import EventProcessor

        result = evaluator.run(agent.policy(torch.device("cpu")), env_steps=7,
                               events=EventProcessor())
    finally:
        evaluator.close()
    assert max(result.lengths) <= 17
    names = sorted(p.name for p in (tmp_path / "videos").iterdir())
    assert names == [f"eval-7-episode-{k}.mp4" for k in range(3)]
    for name in names:
        assert frames(tmp_path / "videos" / name) - 1 in result.lengths


@pytest.mark.slow
def test_rltrain_evaluate_video_writes_the_episode_with_its_frames(
        fitted: tuple[Trainer, DQN, Path], tmp_path: Path) -> None:
    _, _, run_dir = fitted
    process = subprocess.run(
        [sys.executable, "-m", "rltrain.cli", "evaluate", str(run_dir), "--episodes", "1",
         "--video", str(tmp_path / "videos")],
        capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert process.returncode == 0, process.stderr
    metrics = json.loads(process.stdout)
    (video,) = (tmp_path / "videos").iterdir()
    assert video.name == "eval-0-episode-0.mp4"
    assert frames(video) == metrics["eval/length_mean"] + 1


def test_an_env_callable_without_rgb_array_rendering_is_refused_naming_the_fix(
        tmp_path: Path) -> None:
    def make_env() -> gym.Env[object, object]:
        return gym.make("CartPole-v1")

    with pytest.raises(ValueError, match=r"render_mode=None.*A callable of your own must make"):
        Evaluator(make_env, episodes=2, seed=0, device=torch.device("cpu"),
                  video_dir=tmp_path)


def test_video_interval_is_checked() -> None:
    with pytest.raises(ValueError, match="video_interval must be >= 1"):
        TrainerConfig(video_interval=0)
    with pytest.raises(ValueError, match="eval_interval=None makes none"):
        TrainerConfig(video_interval=1, eval_interval=None)
