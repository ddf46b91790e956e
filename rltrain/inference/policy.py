"""Inference in three lines: a trained policy from a checkpoint, its actions for NumPy
observations, and an export of it to a file that runs without rltrain:

    policy = rltrain.load_policy("runs/cartpole")      # the run's last checkpoint
    action, state = policy.predict(obs)                 # as the env takes it
    policy.export("cartpole.pt2")                       # torch.export: torch alone runs it

The agent is rebuilt from the settings the checkpoint stores (its ``config``), for the spaces it
stores (``spaces``; an older checkpoint's environment is made from its config instead), and its
networks are loaded. Everything read from the file is untrusted: it is loaded with
``weights_only=True``, the config may only name rltrain's classes (or, as ``trust`` allows,
those of the user's modules) and the spaces are checked part by part.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from rltrain.agents.base import LearningAgent, Policy
from rltrain.agents.nn.masking import MASK_KEY, mask_space
from rltrain.buffers.observations import layout
from rltrain.checkpoint import Checkpointer, read_checkpoint
from rltrain.checkpoint.spaces import space_from_state
from rltrain.config.files import ConfigError, literal_config, load_stored
from rltrain.config.instantiate import check_stored_targets, make_agent, make_env
from rltrain.config.schema import validate
from rltrain.envs.make import make_probe_env
from rltrain.inference.export import export_program
from rltrain.settings.targets import Trust, within
from rltrain.types import PolicyState, Progress

#: What :meth:`InferencePolicy.predict` takes: an observation or a batch, as arrays (a dict of
#: them for a ``Dict`` space), or anything ``numpy.asarray`` reads.
Observation = Any


class InferencePolicy:
    """A trained agent's policy for NumPy observations (made by :func:`load_policy`).

    Attributes:
        agent: The rebuilt agent, its networks loaded.
        policy: Its acting :class:`~rltrain.agents.base.Policy` on ``device``.
        observation_space: The observation space it was trained on (one env's).
        action_space: Its action space.
        device: Where it computes.
        checkpoint: The file it was loaded from (None when made from an agent).
    """

    def __init__(self, agent: LearningAgent, device: str | torch.device = "cpu",
                 checkpoint: Path | None = None) -> None:
        if agent.spaces is None:
            raise ValueError("InferencePolicy needs an agent that was set up for its spaces "
                             "(trained, or loaded with rltrain.load_policy).")
        self.agent = agent
        self.observation_space, self.action_space = agent.spaces
        self.device = torch.device(device)
        self.policy: Policy = agent.policy(self.device)
        self.checkpoint = checkpoint
        self._layout = layout(self.observation_space)

    def predict(self, obs: Observation, state: PolicyState = None,
                episode_start: Any = None, deterministic: bool = True, *,
                action_mask: Any = None) -> tuple[Any, PolicyState]:
        """The action for ``obs`` and the policy's next recurrent ``state`` (as SB3's).

        Args:
            obs: One observation as the env returns it, or a batch of them (a leading batch
                dimension; for a ``Dict`` space, a dict of arrays per key).
            state: The recurrent state ``predict`` returned for the previous step; None at
                the start of the episodes. Memoryless policies return None.
            episode_start: True (or an array of one per row) where an episode starts again
                with this observation: those rows' state is reset.
            deterministic: The greedy action (the distribution's mode); False samples it as
                the agent explores while collecting.
            action_mask: The valid actions (0/1, one per action; a batch of them for a batch
                of observations), for a policy trained with masks: it becomes the
                observation's ``action_mask`` (with ``obs`` as its ``observation`` for an env
                wrapped by :class:`~rltrain.envs.masking.InfoActionMask`). Default: the mask
                ``obs`` carries, if any.

        Returns:
            ``(action, state)``: the action as the env takes it (an ``int`` for an unbatched
            ``Discrete`` space, else a NumPy array of the action space's dtype), with a
            leading batch dimension when ``obs`` had one.
        """
        tensors, batch, batched = self._tensors(self._with_mask(obs, action_mask))
        if state is None:
            state = self.policy.initial_state(batch)
        elif any(part.shape[0] != batch for part in _parts(state)):
            raise ValueError(f"state holds {_parts(state)[0].shape[0]} rows and obs {batch}: "
                             "pass the state predict returned for a batch of this size (None "
                             "starts afresh).")
        if state is not None and episode_start is not None:
            done = np.broadcast_to(np.asarray(episode_start, dtype=bool), (batch,))
            state = self.policy.reset_state(state, torch.as_tensor(done.copy()))
        with torch.inference_mode():
            step = self.policy.act(tensors, state, deterministic)
        return self._action(step.action, batched), step.state

    def _with_mask(self, obs: Observation, action_mask: Any) -> Observation:
        """``obs`` with ``action_mask`` as its mask (``predict``'s argument)."""
        if action_mask is None:
            return obs
        if mask_space(self.observation_space) is None:
            raise ValueError(f"predict(action_mask=...): this policy's observations "
                             f"({self.observation_space}) carry no '{MASK_KEY}'; it was not "
                             "trained with action masks.")
        if isinstance(obs, dict):
            return {**obs, MASK_KEY: action_mask}
        assert isinstance(self.observation_space, gym.spaces.Dict)
        others = sorted(set(self.observation_space.spaces) - {MASK_KEY})
        if others != ["observation"]:
            raise ValueError(f"predict(action_mask=...): pass obs as a dict of {others}.")
        return {"observation": obs, MASK_KEY: action_mask}

    def __call__(self, obs: Observation, deterministic: bool = True) -> Any:
        """The action for a memoryless policy: ``predict(obs)[0]``."""
        return self.predict(obs, deterministic=deterministic)[0]

    def export(self, path: str | Path) -> Path:
        """Write the deterministic policy as a ``torch.export`` program (``torch.export.save``):
        observations in, actions out, with the encoders, the normalisation and the action
        selection in its graph. Load it with ``torch.export.load(path).module()``; see
        :func:`rltrain.inference.export.export_program` for its inputs and outputs."""
        return export_program(self.policy, self.observation_space, self.action_space,
                              Path(path), self.device)

    def _tensors(self, obs: Observation) -> tuple[Any, int, bool]:
        parts = self._layout
        if isinstance(parts, dict):
            if not isinstance(obs, Mapping) or sorted(obs) != sorted(parts):
                keys = sorted(obs) if isinstance(obs, Mapping) else type(obs).__name__
                raise ValueError(f"This policy takes dict observations with the keys "
                                 f"{sorted(parts)}; got {keys}.")
            arrays = {key: _array(obs[key], *parts[key], f"obs[{key!r}]") for key in parts}
            ranks = {key: a.ndim - len(parts[key][0]) for key, a in arrays.items()}
            sizes = {a.shape[0] if ranks[k] else 1 for k, a in arrays.items()}
            if len(set(ranks.values())) > 1 or len(sizes) > 1:
                raise ValueError(f"The keys of a dict observation must all be one observation, "
                                 f"or batches of one size; got shapes "
                                 f"{ {k: a.shape for k, a in arrays.items()} }.")
            batched = next(iter(ranks.values())) == 1
            batch = sizes.pop()
            tensors: Any = {key: self._tensor(a, batched) for key, a in arrays.items()}
            return tensors, batch, batched
        array = _array(obs, *parts, "obs")
        batched = array.ndim == len(parts[0]) + 1
        return self._tensor(array, batched), array.shape[0] if batched else 1, batched

    def _tensor(self, array: np.ndarray, batched: bool) -> torch.Tensor:
        return torch.as_tensor(array if batched else array[None], device=self.device)

    def _action(self, action: torch.Tensor, batched: bool) -> Any:
        space = self.action_space
        values = action.detach().cpu().numpy()
        dtype = np.int64 if isinstance(space, gym.spaces.Discrete) else space.dtype
        values = values.reshape(values.shape[0], *(space.shape or ())).astype(dtype)
        if batched:
            return values
        return int(values[0]) if isinstance(space, gym.spaces.Discrete) else values[0]


def _parts(state: PolicyState) -> list[torch.Tensor]:
    return [] if state is None else [state] if isinstance(state, torch.Tensor) else list(state)


def _array(value: Any, shape: tuple[int, ...], dtype: np.dtype[Any], where: str) -> np.ndarray:
    """``value`` as an array of ``dtype`` whose trailing dimensions are ``shape`` (one more in
    front for a batch)."""
    array = np.asarray(value)
    if array.dtype != dtype and not np.can_cast(array.dtype, dtype, "same_kind"):
        raise ValueError(f"{where}: this policy takes {dtype} observations (as its env returns "
                         f"them); got {array.dtype}.")
    if array.ndim not in (len(shape), len(shape) + 1) or tuple(array.shape[-len(shape):]
                                                                if shape else ()) != shape:
        raise ValueError(f"{where}: this policy takes observations of shape {shape}, or "
                         f"batches of shape (batch, {', '.join(map(str, shape))}); got shape "
                         f"{array.shape}.")
    array = np.asarray(array, dtype=dtype)
    return array if array.flags.c_contiguous else array.copy()  # torch takes no negative strides


def load_policy(path: str | Path, *, which: str = "last", device: str | torch.device = "cpu",
                trust: Collection[str] = ()) -> InferencePolicy:
    """The policy of a trained run, rebuilt from its checkpoint, ready to :meth:`predict
    <InferencePolicy.predict>`.

    Args:
        path: A checkpoint file, or a run directory (its ``which`` checkpoint).
        which: ``"last"`` (default) or ``"best"``, for a run directory.
        device: Where the policy computes. Default ``"cpu"``.
        trust: Modules whose classes the stored config may name besides rltrain's (an agent
            or environment of your own, as ``rltrain evaluate --trust``). Default none.

    Raises:
        FileNotFoundError: Nothing to load at ``path``.
        ValueError: The file is not an rltrain checkpoint, or what it stores cannot be trusted
            or does not fit together (a :class:`~rltrain.config.files.ConfigError` for its config).
    """
    checkpoint, run_dir = resolve(Path(path), which)
    state = read_checkpoint(checkpoint)
    config = stored_config(checkpoint, state)
    guard = Trust(stored_in=run_dir, modules=list(trust))
    check_stored_targets(config, guard)
    agent = make_agent(config.agent, guard)
    if state.get("agent_class") != type(agent).__name__:
        raise ValueError(f"{checkpoint} holds a {state.get('agent_class')!s:.40} checkpoint, "
                         f"but its config makes a {type(agent).__name__}; it was altered.")
    observation_space, action_space = stored_spaces(checkpoint, state, config, guard)
    agent.setup(observation_space=observation_space, action_space=action_space,
                device=torch.device(device), progress=stored_progress(state))
    try:
        agent.load_state_dict(state["agent"])
    except (RuntimeError, KeyError, TypeError) as error:
        raise ValueError(f"{checkpoint}: its networks do not fit the agent its config "
                         f"describes: {str(error).splitlines()[0][:300]}") from None
    agent.eval()
    return InferencePolicy(agent, device, checkpoint)


def export_policy(path: str | Path, out: str | Path, *, which: str = "last",
                  device: str | torch.device = "cpu", trust: Collection[str] = ()) -> Path:
    """``load_policy(path, ...).export(out)``: a run's policy as a file that runs without
    rltrain (what ``rltrain export RUN_DIR|CHECKPOINT OUT`` does). Returns ``out``."""
    return load_policy(path, which=which, device=device, trust=trust).export(out)


def resolve(path: Path, which: str) -> tuple[Path, Path]:
    """The checkpoint file ``path`` names (a file, or a run directory's ``which``) and its run
    directory."""
    if which not in ("last", "best"):
        raise ValueError(f"which must be 'last' or 'best'; got {which!r}.")
    if path.is_file():
        run_dir = path.parent.parent if path.parent.name == "checkpoints" else path.parent
        return path, run_dir
    if not path.is_dir():
        raise FileNotFoundError(f"No checkpoint or run directory at {path}.")
    folder = path / "checkpoints"
    if not folder.is_dir() and (path / "config.yaml").is_file():
        # A run whose checkpoint_dir was set: used only when it lies inside the run directory
        # (what a run directory says is untrusted).
        stored = OmegaConf.select(load_stored(path / "config.yaml"), "trainer.checkpoint_dir")
        if isinstance(stored, str) and not within(Path(stored), path):
            raise FileNotFoundError(
                f"{path} has no checkpoints/ folder; its config names {stored[:200]} as its "
                "checkpoint folder, outside the run directory (what a run directory says is "
                "untrusted). Pass that checkpoint file, or confirm the folder (rltrain "
                f"evaluate: trainer.checkpoint_dir={stored[:200]}).")
        folder = Path(stored) if isinstance(stored, str) else folder
    return Checkpointer(folder).resolve(which), path


def stored_config(checkpoint: Path, state: Mapping[str, Any]) -> DictConfig:
    """The run config ``checkpoint`` stores (an older file's: its run directory's
    ``config.yaml``), validated."""
    stored = state.get("config")
    if isinstance(stored, dict) and stored:
        config = literal_config(stored)
    else:
        yaml = checkpoint.parent.parent / "config.yaml"
        if not yaml.is_file():
            raise ValueError(f"{checkpoint} stores no run config and there is no "
                             f"{yaml}: the agent's settings are unknown. Build the agent "
                             "yourself and use rltrain.load_agent.")
        config = load_stored(yaml)
    try:
        return validate(config)
    except ConfigError as error:
        raise ConfigError(f"{checkpoint}: its stored config: {error}") from None


def stored_spaces(checkpoint: Path, state: Mapping[str, Any], config: DictConfig,
                  trust: Trust) -> tuple[gym.Space[Any], gym.Space[Any]]:
    """The spaces ``checkpoint`` stores; for an older file (or a space it could not store),
    those of the environment its config describes, made once."""
    spaces = state.get("spaces")
    if spaces is not None:
        if not isinstance(spaces, dict):
            raise ValueError(f"{checkpoint}: its 'spaces' is not a dict; it was altered.")
        if spaces.get("observation") is not None and spaces.get("action") is not None:
            try:
                return (space_from_state(spaces["observation"], "observation space"),
                        space_from_state(spaces["action"], "action space"))
            except ValueError as error:
                raise ValueError(f"{checkpoint}: {error}.") from None
    probe = make_probe_env(make_env(config.env, trust))
    try:
        return probe.observation_space, probe.action_space
    finally:
        probe.close()


def stored_progress(state: Mapping[str, Any]) -> Progress:
    """The counters a checkpoint stores (schedules such as DQN's epsilon read them); zeros
    where they are missing or not counts."""
    saved = state.get("progress")
    fields = [f.name for f in dataclasses.fields(Progress)]
    if isinstance(saved, dict) and all(
            isinstance(saved.get(n), int) and not isinstance(saved.get(n), bool)
            and saved[n] >= 0 for n in fields):
        return Progress(**{n: saved[n] for n in fields})
    return Progress()


