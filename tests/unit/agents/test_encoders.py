"""Observations beyond flat vectors: the encoder chosen from the observation space (a CNN for
images, with their scaling and channel order; one encoder per key of a Dict), storage in the
space's dtype (uint8 images stay uint8), exact resume with image and Dict observations, the
refusal of what cannot be encoded (naming the key and the wrapper that drops it), and the
shipped MiniGrid preset's encoder (its learning is measured by benchmarks/dqn_minigrid.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import QUIET, assert_same_tensors, env_snapshot, straight_and_resumed

from rltrain import (
    DQN,
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
from rltrain.agents.nn.encoders import (
    DictEncoder,
    FlatEncoder,
    ImageEncoder,
    OneHotEncoder,
    check_observation_space,
    make_encoder,
)
from rltrain.agents.nn.networks import QNetwork
from rltrain.buffers import ReplayBuffer, RolloutBuffer
from rltrain.checkpoint import read_checkpoint
from rltrain.envs.make import EnvSpec
from rltrain.types import Progress, Transitions

SIDE = 6  # the pixel envs' images: 6x6x3, the small CNN


class CartPolePixels(gym.ObservationWrapper[Any, Any, Any]):
    """CartPole seen as a ``SIDE x SIDE x 3`` uint8 image: a bright column where the cart is, a
    bright row for the pole's angle, the velocities' signs in the third channel's corners."""

    def __init__(self, env: gym.Env[Any, Any]) -> None:
        super().__init__(env)
        self.observation_space = gym.spaces.Box(0, 255, (SIDE, SIDE, 3), np.uint8)

    def observation(self, observation: Any) -> Any:
        x, x_dot, theta, theta_dot = (float(v) for v in observation)
        image = np.zeros((SIDE, SIDE, 3), np.uint8)
        image[:, int(np.clip((x + 2.4) / 4.8 * SIDE, 0, SIDE - 1)), 0] = 255
        image[int(np.clip((theta + 0.21) / 0.42 * SIDE, 0, SIDE - 1)), :, 1] = 255
        image[0, 0, 2], image[-1, -1, 2] = 255 * (x_dot > 0), 255 * (theta_dot > 0)
        return image


class CartPoleDict(gym.ObservationWrapper[Any, Any, Any]):
    """CartPole as a Dict: its pixels (``CartPolePixels``), its state vector and the sign of
    the pole's velocity as a Discrete."""

    def __init__(self, env: gym.Env[Any, Any]) -> None:
        super().__init__(env)
        self.pixels = CartPolePixels(env)
        self.observation_space = gym.spaces.Dict({
            "pixels": self.pixels.observation_space, "state": env.observation_space,
            "spin": gym.spaces.Discrete(2)})

    def observation(self, observation: Any) -> Any:
        return {"pixels": self.pixels.observation(observation),
                "state": np.asarray(observation, np.float32),
                "spin": int(observation[3] > 0)}


PIXELS = EnvSpec("CartPole-v1", wrappers=(CartPolePixels,))
DICT = EnvSpec("CartPole-v1", wrappers=(CartPoleDict,))
HWC = gym.spaces.Box(0, 255, (7, 7, 3), np.uint8)  # MiniGrid's view
CHW = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)  # Atari's frame stack


def images(space: gym.spaces.Box, n: int, seed: int = 0) -> torch.Tensor:
    space.seed(seed)
    return torch.as_tensor(np.stack([space.sample() for _ in range(n)]))


# ---------------------------------------------------------------------------------------------
# The encoder for each space
# ---------------------------------------------------------------------------------------------


def test_a_small_hwc_uint8_image_gets_the_small_cnn_channels_first_and_divided_by_255() -> None:
    encoder = make_encoder(HWC)
    assert isinstance(encoder, ImageEncoder) and encoder.channels_last
    convs = [m for m in encoder.cnn if isinstance(m, torch.nn.Conv2d)]
    assert [(c.in_channels, c.out_channels, c.kernel_size, c.stride) for c in convs] == [
        (3, 16, (2, 2), (1, 1)), (16, 32, (2, 2), (1, 1)), (32, 64, (2, 2), (1, 1))]
    assert encoder.linear[0].in_features == 64 * 4 * 4 and encoder.out_features == 128
    obs = images(HWC, 5)
    assert obs.dtype == torch.uint8
    by_hand = encoder.linear(encoder.cnn(obs.permute(0, 3, 1, 2).float() / 255))
    features = encoder(obs)
    assert features.shape == (5, 128) and features.dtype == torch.float32
    assert torch.allclose(features, by_hand)


def test_a_chw_atari_frame_stack_gets_the_nature_cnn() -> None:
    encoder = make_encoder(CHW)
    assert isinstance(encoder, ImageEncoder) and not encoder.channels_last
    convs = [m for m in encoder.cnn if isinstance(m, torch.nn.Conv2d)]
    assert [(c.in_channels, c.out_channels, c.kernel_size, c.stride) for c in convs] == [
        (4, 32, (8, 8), (4, 4)), (32, 64, (4, 4), (2, 2)), (64, 64, (3, 3), (1, 1))]
    assert encoder.linear[0].in_features == 64 * 7 * 7 and encoder.out_features == 512
    assert encoder(images(CHW, 2)).shape == (2, 512)


def test_the_same_image_hwc_or_chw_gives_the_same_features() -> None:
    hwc = make_encoder(gym.spaces.Box(0, 255, (40, 40, 3), np.uint8))
    chw = make_encoder(gym.spaces.Box(0, 255, (3, 40, 40), np.uint8))
    chw.load_state_dict(hwc.state_dict())
    obs = images(gym.spaces.Box(0, 255, (40, 40, 3), np.uint8), 3)
    assert torch.allclose(hwc(obs), chw(obs.permute(0, 3, 1, 2).contiguous()), atol=1e-6)


@pytest.mark.parametrize("shape, last", [((7, 7, 20), True), ((8, 84, 84), False),
                                          ((84, 84, 4), True), ((1, 64, 64), False),
                                          ((4, 4, 16), True), ((3, 5, 5), False)])
def test_the_channel_axis_is_guessed_from_the_shape(shape: tuple[int, ...], last: bool) -> None:
    """With encoder='cnn' (a 3-D Box that is not an image by SB3's rule): the two equal sides
    are the grid (gymnasium-2048's 4x4x16 board is channel-last, not 4 channels of 4x16)."""
    encoder = make_encoder(gym.spaces.Box(0, 255, shape, np.uint8), encoder="cnn")
    assert isinstance(encoder, ImageEncoder) and encoder.channels_last is last


def test_a_bounded_float_image_is_scaled_by_its_bounds_and_an_unbounded_one_not() -> None:
    bounded = make_encoder(gym.spaces.Box(-1.0, 3.0, (3, 5, 5), np.float32), encoder="cnn")
    assert isinstance(bounded, ImageEncoder)
    assert (float(bounded.low), float(bounded.span)) == (-1.0, 4.0)
    low = np.zeros((5, 5, 2), np.float32)
    high = np.stack([np.full((5, 5), 2.0), np.full((5, 5), 10.0)], axis=-1).astype(np.float32)
    per_channel = make_encoder(gym.spaces.Box(low, high), encoder="cnn")
    assert isinstance(per_channel, ImageEncoder) and per_channel.span.shape == (2, 5, 5)
    assert per_channel.span[:, 0, 0].tolist() == [2.0, 10.0]  # channels first, as the pixels
    unbounded = make_encoder(gym.spaces.Box(-np.inf, np.inf, (5, 5, 3), np.float32),
                             encoder="cnn")
    assert isinstance(unbounded, ImageEncoder)
    assert (float(unbounded.low), float(unbounded.span)) == (0.0, 1.0)
    raw = make_encoder(HWC, normalize_images=False)
    assert isinstance(raw, ImageEncoder) and float(raw.span) == 1.0


def test_vectors_are_flattened_without_parameters_and_keep_the_q_networks_names() -> None:
    encoder = make_encoder(gym.spaces.Box(-1, 1, (4,), np.float32))
    assert isinstance(encoder, FlatEncoder) and encoder.out_features == 4
    assert not list(encoder.parameters())
    # A checkpoint of a vector Q-network keeps its names: the encoder adds none.
    assert sorted(QNetwork(encoder, 2, [8]).state_dict()) == [
        "q.0.bias", "q.0.weight", "q.2.bias", "q.2.weight"]


def test_a_dict_concatenates_its_keys_encoders_in_sorted_order() -> None:
    space = gym.spaces.Dict({"vector": gym.spaces.Box(-1, 1, (3,), np.float32), "image": HWC,
                             "direction": gym.spaces.Discrete(4, start=1)})
    encoder = make_encoder(space)
    assert isinstance(encoder, DictEncoder)
    assert encoder.keys == ["direction", "image", "vector"]
    assert [type(e) for e in encoder.encoders] == [OneHotEncoder, ImageEncoder, FlatEncoder]
    assert encoder.out_features == 4 + 128 + 3
    obs = {"image": images(HWC, 2), "vector": torch.tensor([[0.5, -0.5, 1.0], [0, 0, 0.25]]),
           "direction": torch.tensor([1, 4])}
    features = encoder(obs)
    assert features.shape == (2, 135)
    assert features[:, :4].tolist() == [[1, 0, 0, 0], [0, 0, 0, 1]]  # one-hot of start=1
    assert torch.equal(features[:, 4:132], encoder.encoders[1](obs["image"]))
    assert torch.equal(features[:, 132:], obs["vector"])


# ---------------------------------------------------------------------------------------------
# What is refused, and the advice
# ---------------------------------------------------------------------------------------------


class Mission(gym.Space[str]):
    """A space Gymnasium cannot flatten (as MiniGrid's MissionSpace)."""

    def contains(self, x: Any) -> bool:
        return isinstance(x, str)


def test_a_dict_key_that_cannot_be_encoded_is_named_with_the_wrapper_that_drops_it() -> None:
    space = gym.spaces.Dict({"image": HWC, "direction": gym.spaces.Discrete(4),
                             "mission": Mission()})
    with pytest.raises(SpaceError) as info:
        check_observation_space("DQN", space)
    message = str(info.value)
    assert "DQN cannot encode the observation key 'mission'" in message
    assert "minigrid.wrappers.ImgObsWrapper(env)" in message
    assert "gymnasium.wrappers.FilterObservation(env, ['direction', 'image'])" in message
    # and their command-line forms
    assert "'env.wrappers=[{_target_: minigrid.wrappers.ImgObsWrapper}]'" in message
    assert ("'env.wrappers=[{_target_: gymnasium.wrappers.FilterObservation, filter_keys: "
            "[direction, image]}]'") in message
    assert "FlattenObservation" not in message  # it cannot flatten the mission
    text = gym.spaces.Dict({"image": HWC, "note": gym.spaces.Text(8)})
    with pytest.raises(SpaceError, match=r"key 'note'.*FilterObservation\(env, \['image'\]\)"
                                         r".*or gymnasium\.wrappers\.FlattenObservation"):
        check_observation_space("PPO", text)  # a Text can be flattened: both fixes


def test_minigrids_own_observation_is_refused_before_training_with_the_fix(
        tmp_path: Path) -> None:
    pytest.importorskip("minigrid")
    trainer = Trainer(num_steps=100, eval_interval=None, run_dir=tmp_path / "run", **QUIET)
    with pytest.raises(SpaceError, match=r"'mission'.*minigrid\.wrappers\.ImgObsWrapper\(env\)"
                                         r".*FilterObservation\(env, \['direction', 'image'\]\)"):
        trainer.fit(EnvSpec("MiniGrid-Empty-5x5-v0", imports=("minigrid",)), DQN())
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("agent", [DQN, PPO, SAC])
def test_a_space_no_encoder_takes_is_refused_with_the_command_line_fix(agent: type) -> None:
    action = gym.spaces.Box(-1, 1, (1,), np.float32) if agent is SAC else gym.spaces.Discrete(2)
    name = agent.__name__
    with pytest.raises(SpaceError, match=(
            rf"^{name} takes Box, Discrete, MultiDiscrete and MultiBinary observations, or a "
            r"Dict of them; got Text\(.*\)\. Flatten it .*gymnasium\.wrappers\."
            r"FlattenObservation\(env\), from the command line 'env\.wrappers=\[\{_target_: "
            r"gymnasium\.wrappers\.FlattenObservation\}\]'")):
        agent().check_spaces(gym.spaces.Text(8), action)
    graph = gym.spaces.Graph(gym.spaces.Box(0, 1, (2,)), None)  # cannot be flattened
    with pytest.raises(SpaceError, match=r"got Graph.*gymnasium\.ObservationWrapper of your "
                                         r"own, from the command line 'env\.wrappers=\[\{"
                                         r"_target_: my_wrappers\.ToBox\}\]'"):
        agent().check_spaces(graph, action)


def test_ppo_normalises_vectors_only() -> None:
    with pytest.raises(SpaceError, match=r"normalize_observations takes vector observations.*"
                                         r"the image encoder scales pixels"):
        PPO(PPOConfig(normalize_observations=True)).check_spaces(HWC, gym.spaces.Discrete(2))


# ---------------------------------------------------------------------------------------------
# Storage in the space's dtype
# ---------------------------------------------------------------------------------------------


def test_a_uint8_image_replay_buffer_holds_uint8_bytes(tmp_path: Path) -> None:
    env = PIXELS()
    capacity = 1_000
    buffer = DQN().make_buffer(capacity, num_envs=1, observation_space=env.observation_space,
                               action_space=env.action_space, seed=0,
                               device=torch.device("cpu"))
    assert isinstance(buffer, ReplayBuffer)
    assert buffer.observations.dtype == np.uint8
    # observation and next observation (uint8), an int64 action, 3 float32 scalars
    assert buffer.nbytes == capacity * (2 * SIDE * SIDE * 3 + 8 + 3 * 4)
    env.close()


def test_a_dict_replay_buffer_stores_each_key_in_its_dtype_and_samples_them() -> None:
    env = DICT()
    buffer = ReplayBuffer(10, observation_space=env.observation_space,
                          action_space=env.action_space)
    assert isinstance(buffer.observations, dict)
    assert {k: v.dtype for k, v in buffer.observations.items()} == {
        "pixels": np.uint8, "spin": np.int64, "state": np.float32}
    assert buffer.nbytes == 10 * (2 * (SIDE * SIDE * 3 + 8 + 4 * 4) + 8 + 3 * 4)
    obs, _ = env.reset(seed=0)
    batch_obs = {k: np.asarray([v]) for k, v in obs.items()}
    buffer.add(Transitions(batch_obs, np.array([1]), np.array([1.0]), batch_obs,
                           np.array([False]), np.array([False])))
    sample = buffer.sample(3)
    assert isinstance(sample.observations, dict)
    assert sample.observations["pixels"].dtype == torch.uint8
    assert torch.equal(sample.observations["pixels"][0], torch.as_tensor(obs["pixels"]))
    assert sample.observations["spin"].tolist() == [obs["spin"]] * 3
    env.close()


def test_a_saved_buffer_of_another_dtype_is_refused() -> None:
    env = PIXELS()
    images_buffer = ReplayBuffer(5, observation_space=env.observation_space,
                                 action_space=env.action_space)
    floats = ReplayBuffer(5, observation_space=gym.spaces.Box(0, 255, (SIDE, SIDE, 3),
                                                              np.float32),
                          action_space=env.action_space)
    with pytest.raises(ValueError, match=r"observations have shape \(6, 6, 3\) float32; this "
                                         r"one expects \(6, 6, 3\) uint8"):
        images_buffer.load_state_dict(floats.state_dict())
    env.close()


def test_a_uint8_image_rollout_holds_uint8_bytes() -> None:
    env = PIXELS()
    rollout = RolloutBuffer(16, num_envs=2, observation_space=env.observation_space,
                            action_space=env.action_space)
    assert isinstance(rollout.observations, torch.Tensor)
    assert rollout.observations.dtype == torch.uint8
    # observations and final observations per step, and the last ones, as uint8
    image = SIDE * SIDE * 3
    assert rollout.nbytes - (2 * 16 + 1) * 2 * image == RolloutBuffer(
        16, num_envs=2, observation_space=gym.spaces.Box(0, 1, (0,), np.float32),
        action_space=env.action_space).nbytes
    env.close()


# ---------------------------------------------------------------------------------------------
# Training and exact resume
# ---------------------------------------------------------------------------------------------

N = 400


def dqn_fit(env: EnvSpec, run_dir: Path, num_steps: int,
            ckpt_path: str | None = None) -> tuple[DQN, Trainer]:
    strategy = OffPolicyStrategy(OffPolicyConfig(warmup_steps=100, train_interval=50,
                                                 train_steps=5, batch_size=16,
                                                 buffer_size=1_000, seed=3))
    trainer = Trainer(num_steps=num_steps, strategy=strategy, run_dir=run_dir,
                      eval_interval=200, eval_episodes=2, **QUIET, gradient_clip_val=10.0)
    agent = DQN(DQNConfig(hidden_sizes=[16], exploration_steps=300, target_update_interval=10))
    trainer.fit(env, agent, ckpt_path=ckpt_path)
    return agent, trainer


@pytest.mark.parametrize("env", [PIXELS, DICT], ids=["image", "dict"])
def test_a_run_with_image_or_dict_observations_resumes_bit_for_bit(
        env: EnvSpec, tmp_path_factory: pytest.TempPathFactory) -> None:
    straight, split = straight_and_resumed(
        lambda run_dir, n, ckpt_path=None: dqn_fit(env, run_dir, n, ckpt_path),
        tmp_path_factory, N)
    a = read_checkpoint(straight / "checkpoints" / "last.pt")
    b = read_checkpoint(split / "checkpoints" / "last.pt")
    assert a["progress"]["env_steps"] == b["progress"]["env_steps"] == N
    assert env_snapshot(a["runner"].pop("envs")) == env_snapshot(b["runner"].pop("envs"))
    observations = a["buffer"]["observations"]
    pixels = observations["pixels"] if isinstance(observations, dict) else observations
    assert pixels.dtype == torch.uint8 and len(pixels) == N  # the replay, as uint8
    for part in ("agent", "optimization", "buffer", "runner", "random", "progress"):
        assert_same_tensors(a[part], b[part], part)


def test_ppo_trains_on_dict_observations_and_resumes_bit_for_bit(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    def fit(run_dir: Path, num_steps: int, ckpt_path: str | None = None) -> None:
        strategy = OnPolicyStrategy(OnPolicyConfig(num_envs=2, n_steps=16, batch_size=16,
                                                   update_epochs=2, seed=1))
        Trainer(num_steps=num_steps, strategy=strategy, run_dir=run_dir, eval_interval=None,
                **QUIET).fit(DICT, PPO(PPOConfig(hidden_sizes=[16])), ckpt_path=ckpt_path)

    straight, split = straight_and_resumed(fit, tmp_path_factory, 128)
    a = read_checkpoint(straight / "checkpoints" / "last.pt")
    b = read_checkpoint(split / "checkpoints" / "last.pt")
    assert a["buffer"]["observations"]["pixels"].dtype == torch.uint8
    a["runner"].pop("envs"), b["runner"].pop("envs")
    for part in ("agent", "optimization", "buffer", "runner", "progress"):
        assert_same_tensors(a[part], b[part], part)


class PendulumPixel(gym.ObservationWrapper[Any, Any, Any]):
    """Pendulum's three numbers as one 1x1x3 uint8 pixel."""

    def __init__(self, env: gym.Env[Any, Any]) -> None:
        super().__init__(env)
        self.observation_space = gym.spaces.Box(0, 255, (1, 1, 3), np.uint8)

    def observation(self, observation: Any) -> Any:
        return np.clip((observation + 8) / 16 * 255, 0, 255).astype(np.uint8).reshape(1, 1, 3)


def test_sac_trains_on_image_observations(tmp_path: Path) -> None:
    strategy = OffPolicyStrategy(OffPolicyConfig(warmup_steps=50, train_interval=1,
                                                 train_steps=1, batch_size=16,
                                                 buffer_size=500))
    agent = SAC(SACConfig(hidden_sizes=[16]))
    result = Trainer(num_steps=120, strategy=strategy, run_dir=tmp_path, eval_interval=None,
                     **QUIET).fit(EnvSpec("Pendulum-v1", wrappers=(PendulumPixel,)), agent)
    assert result.summary.gradient_steps == 71  # one per env step from the 50th to the 120th
    assert isinstance(agent.actor.encoder, ImageEncoder)
    assert isinstance(agent.critic.encoder, ImageEncoder)
    assert agent.actor.encoder is not agent.critic.encoder


def test_the_minigrid_preset_builds_dqn_over_the_unscaled_small_cnn(tmp_path: Path) -> None:
    """The shipped preset (its learning: benchmarks/dqn_minigrid.py, docs/benchmarks.md)."""
    pytest.importorskip("minigrid")
    from rltrain.config.schema import compose
    from rltrain.envs.make import make_probe_env
    from rltrain.trainer import build

    built = build(compose(["dqn_minigrid"], [f"trainer.run_dir={tmp_path}"]))
    probe = make_probe_env(built.env)
    assert probe.observation_space == gym.spaces.Box(0, 255, (7, 7, 3), np.uint8)
    agent = built.agent
    assert isinstance(agent, DQN)
    agent.setup(observation_space=probe.observation_space, action_space=probe.action_space,
                device=torch.device("cpu"), progress=Progress())
    encoder = agent.q_network.encoder
    assert isinstance(encoder, ImageEncoder) and encoder.channels_last
    assert float(encoder.span) == 1.0  # MiniGrid's cells are indices: not divided by 255
    probe.close()
