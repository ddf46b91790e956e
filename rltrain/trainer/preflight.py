"""What the Trainer checks and builds before a run writes anything: the agent for the env's
spaces, the strategy's own checks, resume settings; and the seeds and metrics it reports."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch

from rltrain.agents.base import LearningAgent
from rltrain.checkpoint import Checkpointer
from rltrain.envs.atari import frame_stack_of
from rltrain.envs.checks import check_env
from rltrain.envs.make import EnvInit, env_name, file_name, make_probe_env
from rltrain.envs.video import check_rendering
from rltrain.observe.events import EvaluationEnd
from rltrain.runtime.distributed import SINGLE, DistributedContext, rank_device
from rltrain.runtime.seeding import derive_seeds, seed_everything
from rltrain.settings.registry import strategy_taking
from rltrain.strategies.base import RLStrategy
from rltrain.strategies.components import RLComponents
from rltrain.trainer.settings import TrainerSettings


def default_run_dir(agent_name: str, env_name: str) -> Path:
    """``runs/<date>-<time>-<agent>-<env>`` under the current directory."""
    return Path("runs") / (f"{time.strftime('%Y%m%d-%H%M%S')}-{file_name(agent_name.lower())}-"
                           f"{file_name(env_name)}")


#: Settings added after checkpoints were written without them: absent from a checkpoint's
#: hparams, they are not compared (its networks are, when loaded). ``agent/encoder``: a
#: vector or image run from before it resumes with ``auto``; a float or non-image 3-D ``Box``
#: run, whose networks were CNNs, with ``agent.encoder=cnn``.
ADDED_SETTINGS = frozenset({"agent/encoder", "agent/adam_eps", "agent/loss", "agent/sde_expln",
                            "agent/sde_full_std", "agent/sde_learn_features",
                            "strategy/frame_stack_replay",
                            "strategy/n_step", "strategy/prioritized",
                            "strategy/priority_alpha", "strategy/priority_beta",
                            "strategy/priority_epsilon"})


def check_resume_settings(checkpoint: Path, state: dict[str, Any],
                          hparams: dict[str, Any]) -> None:
    """Refuse to resume from ``checkpoint`` (holding ``state``) when the strategy's, agent's or
    optimisation settings changed (but for :data:`ADDED_SETTINGS` it predates)."""
    if state.get("weights_only"):
        raise ValueError(
            f"{checkpoint} holds an agent's weights only (Trainer.save_checkpoint), not a "
            "training state: evaluate it (evaluate(ckpt_path=...)) or load it "
            "(load_checkpoint), and resume from the run's own checkpoints ('last' or 'best').")
    saved = state.get("hparams", {})
    if not isinstance(saved, dict):
        raise ValueError(f"{checkpoint} has no valid settings ('hparams'); it was not written "
                         "by rltrain, or it was altered.")
    changed = sorted(k for k in set(saved) | set(hparams) if saved.get(k) != hparams.get(k)
                     and not (k in ADDED_SETTINGS and k not in saved))
    if changed:
        details = "; ".join(f"{k}: {saved.get(k)!r} in the checkpoint, {hparams.get(k)!r} now"
                            for k in changed)
        raise ValueError(
            f"Cannot resume from {checkpoint}: settings differ from the checkpoint's ({details}). "
            "Use the checkpoint's settings. On resume these may change: num_steps, evaluation, "
            "logging and checkpoint settings, the run directory, the devices and on_nan_loss.")


@dataclass(frozen=True)
class Probe:
    """What one environment, made and checked before a run, says of the run's envs.

    Attributes:
        observation_space, action_space: Its spaces, which the agent is built for.
        frame_stack: Frames per observation when it stacks them (its
            ``metadata["frame_stack"]``); 1 when it does not.
    """

    observation_space: gym.Space[Any]
    action_space: gym.Space[Any]
    frame_stack: int


def probe_env(env: EnvInit, trainer: TrainerSettings, seed: int) -> Probe:
    """Make one environment and check it (:func:`~rltrain.envs.checks.check_env`, and its
    rendering when the run records videos) before anything of the run is built."""
    evaluation = trainer.evaluation
    if evaluation.video_interval is not None:
        check_rendering(env)
    probe = make_probe_env(env)
    try:
        check_env(probe, env_name(env), seed=seed,
                  eval_max_episode_steps=evaluation.max_episode_steps,
                  step_timeout=trainer.env_step_timeout)
        return Probe(probe.observation_space, probe.action_space, frame_stack_of(probe))
    finally:
        probe.close()


def setup_agent(agent: LearningAgent, probe: Probe, components: RLComponents,
                seed: int) -> None:
    """Build ``agent`` for the ``probe``'s spaces on the run's device and dtype, with the run's
    counters, before any training starts. The networks are initialised from the global
    generators seeded with ``seed`` (the strategy's), so a seed gives the same initial weights
    whatever ran before."""
    seed_everything(seed)
    agent.setup(observation_space=probe.observation_space, action_space=probe.action_space,
                device=components.device, progress=components.progress,
                dtype=components.dtype, num_steps=components.num_steps)


def check_spaces(env: EnvInit, agent: LearningAgent) -> None:
    """Make one environment and let ``agent`` check its spaces, before any training starts."""
    probe = make_probe_env(env)
    try:
        agent.check_spaces(probe.observation_space, probe.action_space)
    finally:
        probe.close()


def evaluation_seed(trainer: TrainerSettings) -> int:
    """The reset seed of the evaluations of ``trainer``'s strategy (of its last ``fit``, or
    the one given, or the default's): ``derive_seeds(seed).evaluation``."""
    seed = trainer.strategy.seed if trainer.strategy is not None else trainer.seed or 0
    return derive_seeds(seed).evaluation


def evaluation_metrics(result: EvaluationEnd) -> dict[str, float]:
    """``eval/return_mean``, ``eval/return_std``, ``eval/length_mean`` and ``eval/episodes``."""
    lengths = result.lengths
    return {
        "eval/return_mean": result.return_mean,
        "eval/return_std": result.return_std,
        "eval/length_mean": sum(lengths) / len(lengths) if lengths else float("nan"),
        "eval/episodes": float(len(result.returns)),
    }


def make_components(trainer: TrainerSettings, run_dir: Path,
                    distributed: DistributedContext = SINGLE, *, checkpoint: Path | None = None,
                    resume_state: dict[str, Any] | None = None,
                    config: dict[str, Any] | None = None, frame_stack: int = 1) -> RLComponents:
    """The components of a run of ``trainer`` in ``run_dir``, from its settings, for this
    rank of the run's processes (a CUDA device is the rank's own GPU); the rest is what was
    found before (:class:`~rltrain.strategies.components.RLComponents`)."""
    device = rank_device(torch.device(trainer.device), distributed)
    return RLComponents(
        num_steps=trainer.num_steps,
        checkpointer=checkpointer_of(trainer, run_dir, distributed),
        optimization=trainer.optimization,
        interrupter=trainer.interrupter,
        summary=trainer.summary,
        evaluation=dataclasses.replace(trainer.evaluation, video_dir=run_dir / "videos"),
        device=device,
        inference_device=rank_device(torch.device(trainer.inference_device or device),
                                     distributed),
        distributed=distributed,
        sync_interval=trainer.sync_interval,
        env_step_timeout=trainer.env_step_timeout,
        checkpoint=checkpoint,
        resume_state=resume_state,
        config=config or {},
        frame_stack=frame_stack,
    )


def checkpointer_of(trainer: TrainerSettings, run_dir: Path,
                    distributed: DistributedContext = SINGLE) -> Checkpointer:
    """The checkpointer of a run of ``trainer`` in ``run_dir``: its ``checkpoint_io``, or local
    files in ``checkpoint_dir`` (default ``run_dir/checkpoints``)."""
    return Checkpointer(Path(trainer.checkpoint_dir or run_dir / "checkpoints"),
                        interval=trainer.checkpoint_interval,
                        keep_last=trainer.keep_last_checkpoints, keep_best=trainer.keep_best,
                        distributed=distributed, store=trainer.checkpoint_io)


def resolve_checkpoint(ckpt_path: str | Path, run_dir: str | Path | None,
                       trainer: TrainerSettings) -> Path:
    """``"last"`` / ``"best"`` among the run's checkpoints, or the file given; must exist."""
    if ckpt_path in ("last", "best"):
        if run_dir is None:
            raise ValueError(f"ckpt_path={ckpt_path!r} needs a run: give the Trainer its "
                             "run_dir, or pass the path of a checkpoint file.")
        try:
            return checkpointer_of(trainer, Path(run_dir)).resolve(str(ckpt_path))
        except FileNotFoundError as error:
            advice = ("" if "nothing to resume" in str(error) else
                      " Pass the run_dir of the run, or the path of a checkpoint file.")
            raise FileNotFoundError(f"No checkpoint: {error}{advice}") from error
    path, store = Path(ckpt_path), trainer.checkpoint_io
    if not path.is_file() and not (store is not None and store.holds(path)):
        raise FileNotFoundError(
            f"No checkpoint at {path}. Pass ckpt_path='last' or 'best' with the run_dir of "
            "the run, or the path of a checkpoint file.")
    return path


def strategy_for(trainer: TrainerSettings, agent: LearningAgent) -> RLStrategy:
    """The strategy ``trainer`` runs ``agent`` with: the one it was given, refused when it is
    of a kind the agent does not train with, or the agent's own default."""
    settings, strategy = agent.default_strategy_settings(), trainer.strategy
    default = strategy_taking(settings)
    if trainer.default_strategy or strategy is None:
        strategy = default.cls(dataclasses.replace(settings, seed=trainer.seed or 0))
        assert isinstance(strategy, RLStrategy)
        return strategy
    if not strategy.fits(type(agent)):
        raise ValueError(
            f"{type(agent).__name__} trains with {default.name} strategies, not "
            f"{strategy.kind} ({type(strategy).__name__}). Leave strategy out for the agent's "
            f"default, or pass a strategy of kind {default.name}.")
    return strategy
