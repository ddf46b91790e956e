"""Observation spaces a newcomer meets first (issue 27): which 3-D ``Box`` is an image (SB3's
rule: ``uint8``, bounds 0..255, 1, 3 or 4 channels first or last), the ``agent.encoder``
setting that overrides it, the model summary's line naming the encoder chosen, and
``Discrete`` / ``MultiDiscrete`` observations taken directly (FrozenLake, Taxi): stored as
indices, one-hot in the encoder, resumed bit for bit.

gymnasium-2048 is not installed; :class:`Board2048` is a small 2048 game with its observation
space, ``Box(0, 1, (4, 4, 16), uint8)`` (one plane per tile exponent).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import QUIET, assert_same_tensors, env_snapshot, straight_and_resumed

from rltrain import (
    PPO,
    SAC,
    DQNConfig,
    OffPolicyConfig,
    OffPolicyStrategy,
    OnPolicyConfig,
    OnPolicyStrategy,
    PPOConfig,
    SACConfig,
    Trainer,
)
from rltrain.agents.base import SpaceError
from rltrain.agents.dqn import DQN
from rltrain.agents.nn.encoders import (
    FlatEncoder,
    ImageEncoder,
    MultiOneHotEncoder,
    OneHotEncoder,
    encoder_lines,
    make_encoder,
)
from rltrain.buffers import ReplayBuffer
from rltrain.checkpoint import Checkpointer, read_checkpoint
from rltrain.cli import main
from rltrain.envs.make import EnvSpec
from rltrain.inference import load_policy
from rltrain.trainer.preflight import check_resume_settings
from rltrain.types import Progress

BOARD = gym.spaces.Box(0, 1, (4, 4, 16), np.uint8)  # gymnasium-2048's observation space


def slide_row(row: np.ndarray) -> tuple[np.ndarray, int]:
    """A 2048 row (tile exponents, 0 empty) slid left, equal neighbours merged once; and the
    points the merges score."""
    tiles, merged, score = [int(v) for v in row if v], [], 0
    while tiles:
        if len(tiles) > 1 and tiles[0] == tiles[1]:
            merged.append(tiles[0] + 1)
            score += 2 ** (tiles[0] + 1)
            tiles = tiles[2:]
        else:
            merged.append(tiles.pop(0))
    return np.array(merged + [0] * (len(row) - len(merged)), np.int64), score


class Board2048(gym.Env[np.ndarray, int]):
    """A 2048 game observed as gymnasium-2048 does: ``Box(0, 1, (4, 4, 16), uint8)``, plane
    ``k`` marking the tiles ``2**k`` (plane 0: empty). Actions slide the tiles (0 left, 1 down,
    2 right, 3 up); a tile appears after each move that moved something."""

    def __init__(self, max_steps: int = 60) -> None:
        self.observation_space = BOARD
        self.action_space = gym.spaces.Discrete(4)
        self.max_steps = max_steps
        self.board = np.zeros((4, 4), np.int64)
        self.steps = 0

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.board, self.steps = np.zeros((4, 4), np.int64), 0
        self._spawn()
        self._spawn()
        return self._obs(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        rotated = np.rot90(self.board, int(action))
        slid = [slide_row(row) for row in rotated]
        board = np.rot90(np.stack([row for row, _ in slid]), -int(action))
        if not np.array_equal(board, self.board):
            self.board = np.ascontiguousarray(board)
            self._spawn()
        self.steps += 1
        stuck = all(np.array_equal(np.rot90(np.stack([slide_row(r)[0] for r in np.rot90(
            self.board, a)]), -a), self.board) for a in range(4))
        return (self._obs(), float(sum(score for _, score in slid)), stuck,
                self.steps >= self.max_steps, {})

    def _spawn(self) -> None:
        empty = np.flatnonzero(self.board == 0)
        if empty.size:
            cell = int(self.np_random.choice(empty))
            self.board.flat[cell] = 1 if self.np_random.random() < 0.9 else 2

    def _obs(self) -> np.ndarray:
        return (self.board[..., None] == np.arange(16)).astype(np.uint8)


class CliffCoordinates(gym.ObservationWrapper[Any, Any, Any]):
    """CliffWalking's state index as ``MultiDiscrete([4, 12])``: its row and column."""

    def __init__(self, env: gym.Env[Any, Any]) -> None:
        super().__init__(env)
        self.observation_space = gym.spaces.MultiDiscrete([4, 12])

    def observation(self, observation: Any) -> Any:
        return np.array(divmod(int(observation), 12), np.int64)


def quiet_cli(run_dir: Path, *overrides: str) -> list[str]:
    """``rltrain fit`` arguments: ``overrides`` into ``run_dir``, without logger or bar."""
    return ["fit", *overrides, f"trainer.run_dir={run_dir}", "trainer.logger=false",
            "trainer.enable_progress_bar=false", "trainer.console_interval=1000"]


# ---------------------------------------------------------------------------------------------
# Which encoder, and the line that says so
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("space", "kind", "line"), [
    (gym.spaces.Box(0, 255, (84, 84, 4), np.uint8), ImageEncoder,
     "encoder: image (84x84x4 uint8, channels last) -> NatureCNN (512 features) -> MLP"),
    (gym.spaces.Box(0, 255, (7, 7, 3), np.uint8), ImageEncoder,  # MiniGrid's view
     "encoder: image (7x7x3 uint8, channels last) -> SmallCNN (128 features) -> MLP"),
    (gym.spaces.Box(0, 255, (4, 84, 84), np.uint8), ImageEncoder,  # Atari's frame stack
     "encoder: image (4x84x84 uint8, channels first) -> NatureCNN (512 features) -> MLP"),
    (BOARD, FlatEncoder,
     "encoder: flat (4x4x16 uint8 -> 256 features) -> MLP; not an image (bounds 0..1, not "
     "0..255): agent.encoder=cnn reads it with a CNN"),
    (gym.spaces.Box(0, 255, (7, 7, 20), np.uint8), FlatEncoder,
     "encoder: flat (7x7x20 uint8 -> 980 features) -> MLP; not an image (7 and 20 on the first "
     "and last axes, not 1, 3 or 4 channels): agent.encoder=cnn reads it with a CNN"),
    (gym.spaces.Box(0, 1, (8, 8, 3), np.float32), FlatEncoder,
     "encoder: flat (8x8x3 float32 -> 192 features) -> MLP; not an image (float32, not uint8): "
     "agent.encoder=cnn reads it with a CNN"),
    (gym.spaces.Box(-1, 1, (4,), np.float32), FlatEncoder,
     "encoder: flat (4 float32 -> 4 features) -> MLP"),
    (gym.spaces.Discrete(500), OneHotEncoder,
     "encoder: one-hot (Discrete(500) -> 500 features) -> MLP"),
    (gym.spaces.MultiDiscrete([4, 12]), MultiOneHotEncoder,
     "encoder: one-hot per component (MultiDiscrete([ 4 12]) -> 16 features) -> MLP"),
], ids=["hwc", "minigrid", "chw", "2048", "one-hot-grid", "float-grid", "vector", "discrete",
        "multidiscrete"])
def test_each_space_gets_its_encoder_and_a_line_naming_it(space: gym.Space[Any], kind: type,
                                                          line: str) -> None:
    encoder = make_encoder(space)
    assert type(encoder) is kind
    assert encoder_lines(encoder) == [line]


def test_the_2048_board_is_no_longer_convolved_over_its_rows() -> None:
    """The bug: Conv2d(4, 16, 2x2) over the board's rows as channels, silently."""
    flat = make_encoder(BOARD)
    assert not any(isinstance(m, torch.nn.Conv2d) for m in flat.modules())
    obs = torch.as_tensor(Board2048().reset(seed=0)[0])[None]
    assert torch.equal(flat(obs), obs.reshape(1, -1).float())  # 0/1 planes, unscaled
    forced = make_encoder(BOARD, encoder="cnn")
    assert isinstance(forced, ImageEncoder) and forced.channels_last  # 16 planes of 4x4
    assert forced.cnn[0].in_channels == 16 and float(forced.span) == 1.0  # bounds 0..1


def test_encoder_mlp_flattens_an_image_scaled_as_the_cnn_would() -> None:
    space = gym.spaces.Box(0, 255, (7, 7, 3), np.uint8)
    flat = make_encoder(space, encoder="mlp")
    assert isinstance(flat, FlatEncoder) and flat.out_features == 147
    pixels = torch.full((2, 7, 7, 3), 255, dtype=torch.uint8)
    assert torch.equal(flat(pixels), torch.ones(2, 147))
    assert make_encoder(space, encoder="mlp", normalize_images=False)(pixels).max() == 255
    assert encoder_lines(flat) == ["encoder: flat (7x7x3 uint8 / 255 -> 147 features) -> MLP; "
                                   "an image flattened by agent.encoder=mlp"]


def test_a_dict_gets_a_line_per_key_and_the_setting_reaches_its_parts() -> None:
    space = gym.spaces.Dict({"board": BOARD, "moves": gym.spaces.Discrete(3)})
    assert encoder_lines(make_encoder(space, encoder="cnn")) == [
        "encoder['board']: image (4x4x16 uint8, channels last, agent.encoder=cnn) -> SmallCNN "
        "(128 features)",
        "encoder['moves']: one-hot (Discrete(3) -> 3 features)",
        "encoder: Dict of 2 keys, concatenated (131 features) -> MLP"]


def test_cnn_on_a_space_without_a_grid_and_an_unknown_setting_are_refused() -> None:
    with pytest.raises(SpaceError, match=r"DQN's encoder=cnn reads 3-D Box observations.*"
                                         r"Discrete\(16\), which has none\. Leave the encoder"):
        DQN(DQNConfig(encoder="cnn")).check_spaces(gym.spaces.Discrete(16),
                                                   gym.spaces.Discrete(4))
    with pytest.raises(ValueError, match=r"SACConfig: encoder must be 'auto' .* got 'CNN'"):
        SACConfig(encoder="CNN")
    with pytest.raises(SpaceError, match=r"normalize_observations takes vector observations; "
                                         r"got Discrete\(16\).*0s and 1s \(one-hot\), "
                                         r"which need no normalising"):
        PPO(PPOConfig(normalize_observations=True)).check_spaces(
            gym.spaces.Discrete(16), gym.spaces.Discrete(2))


def test_the_model_summary_and_console_name_the_encoder(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    strategy = OffPolicyStrategy(OffPolicyConfig(warmup_steps=50, train_interval=50,
                                                 train_steps=1, batch_size=8, buffer_size=200))
    Trainer(num_steps=100, strategy=strategy, run_dir=tmp_path, eval_interval=None,
            logger=False, enable_progress_bar=False, enable_metrics_file=False).fit(
        Board2048, DQN(DQNConfig(hidden_sizes=[16])))
    line = ("encoder: flat (4x4x16 uint8 -> 256 features) -> MLP; not an image (bounds 0..1, "
            "not 0..255): agent.encoder=cnn reads it with a CNN")
    summary = (tmp_path / "model_summary.txt").read_text().splitlines()
    assert summary[0] == line and summary[1].startswith("Name ")  # then the table
    console = capsys.readouterr().out.splitlines()
    assert console[:2] == ["DQN", line]


# ---------------------------------------------------------------------------------------------
# agent.encoder from the command line
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("agent", ["dqn", "ppo", "sac"])
def test_agent_encoder_is_a_key_of_each_agent_with_encoders(
        agent: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fit", f"agent.name={agent}", "agent.encoder=mlp", "--print-config",
                 f"trainer.run_dir={tmp_path}"]) == 0
    assert "  encoder: mlp" in capsys.readouterr().out.splitlines()


@pytest.mark.slow  # trains a CNN (3.5 s)
def test_agent_encoder_cnn_reads_the_2048_board_with_a_cnn_from_the_cli(tmp_path: Path) -> None:
    run_dir = tmp_path / "cnn"
    assert main(quiet_cli(run_dir, "agent.name=dqn", "env._target_=test_observation_spaces."
                          "Board2048", "agent.encoder=cnn", "trainer.num_steps=300",
                          "strategy.warmup_steps=200", "strategy.train_interval=50",
                          "trainer.eval_episodes=2")) == 0
    summary = (run_dir / "model_summary.txt").read_text()
    assert summary.startswith("encoder: image (4x4x16 uint8, channels last, agent.encoder=cnn) "
                              "-> SmallCNN (128 features) -> MLP\n")
    state = read_checkpoint(run_dir / "checkpoints" / "last.pt")
    assert state["agent"]["q_network.encoder.cnn.0.weight"].shape == (16, 16, 2, 2)


def test_agent_encoder_mlp_flattens_minigrids_image_from_the_cli(tmp_path: Path) -> None:
    pytest.importorskip("minigrid")
    run_dir = tmp_path / "mlp"
    assert main(quiet_cli(run_dir, "dqn_minigrid", "agent.encoder=mlp", "trainer.num_steps=300",
                          "strategy.warmup_steps=200", "trainer.eval_episodes=2")) == 0
    summary = (run_dir / "model_summary.txt").read_text()
    # the preset feeds MiniGrid's cells unscaled (normalize_images: false)
    assert summary.startswith("encoder: flat (7x7x3 uint8 -> 147 features) -> MLP; an image "
                              "flattened by agent.encoder=mlp\n")


# ---------------------------------------------------------------------------------------------
# Discrete and MultiDiscrete observations
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("agent", "env", "n"), [
    ("dqn", "FrozenLake-v1", 16), ("dqn", "Taxi-v4", 500),
    pytest.param("ppo", "FrozenLake-v1", 16, marks=pytest.mark.slow),
    pytest.param("ppo", "Taxi-v4", 500, marks=pytest.mark.slow)])
def test_dqn_and_ppo_train_on_discrete_observations_from_the_cli(
        agent: str, env: str, n: int, tmp_path: Path) -> None:
    """No YAML: the agent's own defaults, shortened. (Taxi-v3 is Taxi-v4 in Gymnasium 1.4.)"""
    run_dir = tmp_path / "run"
    schedule = (["strategy.warmup_steps=500", "strategy.train_interval=250"] if agent == "dqn"
                else ["strategy.n_steps=256", "trainer.checkpoint_interval=896"])
    assert main(quiet_cli(run_dir, f"agent.name={agent}", f"env.id={env}",
                          "trainer.num_steps=1024", "trainer.eval_episodes=2",
                          *schedule)) == 0
    summary = (run_dir / "model_summary.txt").read_text()
    assert summary.startswith(f"encoder: one-hot (Discrete({n}) -> {n} features) -> MLP\n")
    state = read_checkpoint(run_dir / "checkpoints" / "last.pt")
    assert state["progress"]["env_steps"] == 1024
    if agent == "ppo":  # a rollout's checkpoint holds the rows it stored: one mid-rollout
        state = read_checkpoint(run_dir / "checkpoints" / "checkpoint-896.pt")
    observations = state["buffer"]["observations"]
    assert observations.dtype == torch.int64  # indices, one per transition (and per env)
    assert observations.shape == ((1024,) if agent == "dqn" else (128, 1))
    assert 0 <= int(observations.min()) and int(observations.max()) < n
    policy = load_policy(run_dir)
    assert policy.predict(3)[0] in range(4 if env == "FrozenLake-v1" else 6)
    assert policy.predict(np.array([0, 3]))[0].shape == (2,)


def test_ppo_trains_on_multidiscrete_observations(tmp_path: Path) -> None:
    agent = PPO(PPOConfig(hidden_sizes=[16]))
    strategy = OnPolicyStrategy(OnPolicyConfig(n_steps=64, batch_size=32, update_epochs=1))
    env = EnvSpec("CliffWalking-v1", kwargs={"max_episode_steps": 50},
                  wrappers=(CliffCoordinates,))
    result = Trainer(num_steps=128, strategy=strategy, run_dir=tmp_path, eval_interval=None,
                     **QUIET).fit(env, agent)
    assert result.summary.env_steps == 128
    assert isinstance(agent.net.encoder, MultiOneHotEncoder)
    rows = torch.tensor([[0, 0], [3, 11]])
    assert agent.net.encoder(rows).nonzero().tolist() == [[0, 0], [0, 4], [1, 3], [1, 15]]


def test_sac_takes_discrete_observations() -> None:
    agent = SAC(SACConfig(hidden_sizes=[8]))
    agent.setup(observation_space=gym.spaces.Discrete(16),
                action_space=gym.spaces.Box(-1, 1, (2,), np.float32),
                device=torch.device("cpu"), progress=Progress())
    assert isinstance(agent.actor.encoder, OneHotEncoder)
    action = agent.policy(torch.device("cpu")).act(torch.tensor([0, 15]), None, True).action
    assert action.shape == (2, 2)


TRANSITIONS = 10_000


def test_a_taxi_replay_buffer_stores_indices_not_one_hots(tmp_path: Path) -> None:
    """10,000 Taxi transitions in the buffer: the checkpoint holds int64 indices (16 bytes of
    observation per transition), where FlattenObservation's one-hots would take 500 x 4 x 2
    bytes as float32 (and twice that as the int64 it returns)."""
    strategy = OffPolicyStrategy(OffPolicyConfig(warmup_steps=TRANSITIONS, seed=0,
                                                 buffer_size=TRANSITIONS))
    with pytest.warns(UserWarning, match="warmup_steps"):  # collecting only: no learning
        Trainer(num_steps=TRANSITIONS, strategy=strategy, run_dir=tmp_path, eval_interval=None,
                **QUIET).fit("Taxi-v4", DQN(DQNConfig(hidden_sizes=[16])))
    checkpoint = Checkpointer(tmp_path / "checkpoints").resolve("last")
    indices = checkpoint.stat().st_size
    one_hot = ReplayBuffer(TRANSITIONS, observation_space=gym.spaces.Box(0, 1, (500,),
                                                                          np.float32),
                           action_space=gym.spaces.Discrete(6)).nbytes
    print(f"\n{TRANSITIONS:,} Taxi transitions: checkpoint {indices / 1e6:.2f} MB with indices; "
          f"the buffer alone {one_hot / 1e6:.1f} MB with float32 one-hots")
    assert read_checkpoint(checkpoint)["buffer"]["observations"].shape == (TRANSITIONS,)
    assert indices < 1e6 and one_hot > 40e6


def dqn_fit(env: str, run_dir: Path, num_steps: int, ckpt_path: str | None = None) -> None:
    strategy = OffPolicyStrategy(OffPolicyConfig(warmup_steps=100, train_interval=50,
                                                 train_steps=5, batch_size=16,
                                                 buffer_size=1_000, seed=3))
    Trainer(num_steps=num_steps, strategy=strategy, run_dir=run_dir, eval_interval=200,
            eval_episodes=2, gradient_clip_val=10.0, **QUIET).fit(
        env, DQN(DQNConfig(hidden_sizes=[16], exploration_steps=300, target_update_interval=10)),
        ckpt_path=ckpt_path)


@pytest.mark.parametrize("env", ["FrozenLake-v1", "Taxi-v4"])
def test_a_dqn_run_on_discrete_observations_resumes_bit_for_bit(
        env: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    straight, split = straight_and_resumed(
        lambda run_dir, n, ckpt_path=None: dqn_fit(env, run_dir, n, ckpt_path),
        tmp_path_factory, 400)
    a = read_checkpoint(straight / "checkpoints" / "last.pt")
    b = read_checkpoint(split / "checkpoints" / "last.pt")
    assert a["progress"]["env_steps"] == b["progress"]["env_steps"] == 400
    assert a["buffer"]["observations"].dtype == torch.int64
    assert env_snapshot(a["runner"].pop("envs")) == env_snapshot(b["runner"].pop("envs"))
    for part in ("agent", "optimization", "buffer", "runner", "random", "progress"):
        assert_same_tensors(a[part], b[part], part)


def test_a_checkpoint_from_before_the_encoder_setting_resumes(tmp_path: Path) -> None:
    """Its hparams lack ``agent/encoder``: any value resumes (auto for vector and image runs,
    cnn for the grids that were CNNs then; the networks' shapes are checked on load); a
    checkpoint that has it compares it."""
    hparams = DQN(DQNConfig(hidden_sizes=[16])).hparams()
    older = {"hparams": {k: v for k, v in hparams.items() if k != "agent/encoder"}}
    for encoder in ("auto", "cnn"):
        check_resume_settings(tmp_path / "old.pt", older, {**hparams, "agent/encoder": encoder})
    with pytest.raises(ValueError, match=r"agent/encoder: 'auto' in the checkpoint, 'cnn' now"):
        check_resume_settings(tmp_path / "new.pt", {"hparams": hparams},
                              {**hparams, "agent/encoder": "cnn"})
