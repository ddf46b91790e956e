"""Observation encoders, chosen from the observation space by :func:`make_encoder`: what turns
a batch of observations (in their storage dtype) into the float feature vectors ``[B,
out_features]`` the agents' MLPs take.

- A ``Box`` that is not 3-D (a vector, or a grid flattened as DQN always did):
  :class:`FlatEncoder`, no parameters.
- A 3-D ``Box``, an image: :class:`ImageEncoder`, a CNN that scales the pixels and puts the
  channels first. The Nature-DQN CNN for images of 36 px a side or more (Atari's 84x84), the
  MiniGrid documentation's small CNN for smaller grids (MiniGrid's 7x7 views).
- A ``Dict``: :class:`DictEncoder`, one encoder per key (sorted), their features concatenated;
  ``Discrete`` parts one-hot (:class:`OneHotEncoder`), ``MultiBinary`` parts flat.

The agents build ``encoder -> MLP`` (DQN's Q-network, PPO's actor-critic, SAC's actor and
critics); :func:`check_observation_space` refuses what no encoder takes, naming the fix.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from rltrain.agents.base import SpaceError

#: Sub-spaces a ``Dict`` observation may hold.
DICT_PARTS = (gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiBinary)
#: Each side, in pixels, from which an image gets the Nature CNN (its three convolutions
#: need 36: 36 -> 8 -> 3 -> 1).
NATURE_MIN_SIDE = 36


class Encoder(nn.Module):
    """An observation encoder: ``forward(obs) -> [B, out_features]`` float features."""

    out_features: int


class FlatEncoder(Encoder):
    """Observations flattened to ``[B, prod(shape)]`` float32 vectors, unscaled.

    Args:
        shape: One observation's shape.
    """

    def __init__(self, shape: tuple[int, ...]) -> None:
        super().__init__()
        self.out_features = int(np.prod(shape))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if obs.dim() == 2 and obs.dtype == torch.float32:
            return obs  # already flat float32 vectors: two no-op calls saved (about 3 µs)
        return obs.reshape(obs.shape[0], -1).float()


class OneHotEncoder(Encoder):
    """A ``Discrete(n, start)`` observation as a one-hot vector ``[B, n]``.

    Args:
        space: The ``Discrete`` space.
    """

    def __init__(self, space: gym.spaces.Discrete) -> None:
        super().__init__()
        self.out_features, self.start = int(space.n), int(space.start)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return F.one_hot(obs.reshape(-1).long() - self.start, self.out_features).float()


def channels_last(shape: tuple[int, ...]) -> bool:
    """Whether a 3-D image of ``shape`` is ``HxWxC`` (True) or ``CxHxW``: channel-last when
    the last side is 1..4 (RGB, grey, RGBA, MiniGrid's 7x7x3), else channel-first when the
    first is (Atari frame stacks, 4x84x84); otherwise channel-first only when the last two
    sides are equal and the first is not (8x84x84), channel-last otherwise (Gymnasium's and
    MiniGrid's convention: a 7x7x20 one-hot grid)."""
    if shape[2] <= 4:
        return True
    if shape[0] <= 4:
        return False
    return not (shape[1] == shape[2] and shape[0] != shape[1])


def _scaling(space: gym.spaces.Box, last: bool,
             normalize: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """``(low, span)`` mapping pixels to ``[0, 1]``, channel-first: ``uint8`` by 255 (SB3's
    and CleanRL's convention, whatever its declared bounds), another bounded ``Box`` by its
    bounds, an unbounded one (or any, without ``normalize``) not at all. Scalars where the
    bounds are the same everywhere."""
    if not normalize:
        return torch.tensor(0.0), torch.tensor(1.0)
    if space.dtype == np.uint8:
        return torch.tensor(0.0), torch.tensor(255.0)
    low, high = space.low.astype(np.float64), space.high.astype(np.float64)
    if not (np.isfinite(low).all() and np.isfinite(high).all()):
        return torch.tensor(0.0), torch.tensor(1.0)
    span = np.where(high > low, high - low, 1.0)  # a constant pixel is only shifted
    if (low == low.flat[0]).all() and (span == span.flat[0]).all():
        return torch.tensor(float(low.flat[0])), torch.tensor(float(span.flat[0]))
    order = (2, 0, 1) if last else (0, 1, 2)
    return (torch.as_tensor(low.transpose(order), dtype=torch.float32),
            torch.as_tensor(span.transpose(order), dtype=torch.float32))


class ImageEncoder(Encoder):
    """A CNN over a 3-D ``Box`` of images: ``[B, H, W, C]`` (or ``[B, C, H, W]``, see
    :func:`channels_last`) in the storage dtype -> ``[B, out_features]``.

    Pixels are cast to float on the device and scaled to ``[0, 1]`` (``uint8`` by 255, another
    bounded ``Box`` by its bounds; not at all with ``normalize_images=False``), channels put
    first. Images of at least 36 px a side get the
    Nature-DQN CNN (Mnih et al. 2015, Nature 518:529, Methods): 32 8x8 filters stride 4, 64 4x4
    stride 2, 64 3x3 stride 1, a linear layer of 512, ReLUs. Smaller grids get the MiniGrid
    documentation's CNN (minigrid.farama.org, "Training Minigrid Environments"): 16, 32 and 64
    2x2 filters stride 1 (as many as the side allows: a 7x7 view keeps all three, 4x4 of it),
    a linear layer of 128, ReLUs.

    Args:
        space: The image ``Box`` (3-D).
        normalize_images: Scale the pixels to ``[0, 1]`` (SB3's ``normalize_images``). False
            feeds them as they are: MiniGrid's images hold small object, colour and state
            indices (0-10) that 255 would shrink to nearly nothing. Default True.
    """

    low: torch.Tensor
    span: torch.Tensor

    def __init__(self, space: gym.spaces.Box, *, normalize_images: bool = True) -> None:
        super().__init__()
        shape = tuple(int(n) for n in space.shape)
        self.channels_last = channels_last(shape)
        c, h, w = (shape[2], shape[0], shape[1]) if self.channels_last else shape
        low, span = _scaling(space, self.channels_last, normalize_images)
        self.register_buffer("low", low)
        self.register_buffer("span", span)
        layers: list[nn.Module] = []
        if min(h, w) >= NATURE_MIN_SIDE:
            for out, kernel, stride in ((32, 8, 4), (64, 4, 2), (64, 3, 1)):
                layers += [nn.Conv2d(c, out, kernel, stride), nn.ReLU()]
                c = out
            self.out_features = 512
        else:
            for out in (16, 32, 64)[:max(min(h, w) - 1, 0)]:
                layers += [nn.Conv2d(c, out, 2), nn.ReLU()]
                c = out
            self.out_features = 128
        self.cnn = nn.Sequential(*layers, nn.Flatten())
        with torch.no_grad():
            flat = int(self.cnn(torch.zeros(1, *self.chw(shape))).shape[1])
        self.linear = nn.Sequential(nn.Linear(flat, self.out_features), nn.ReLU())

    def chw(self, shape: tuple[int, ...]) -> tuple[int, int, int]:
        """An image shape as ``(C, H, W)``."""
        return (shape[2], shape[0], shape[1]) if self.channels_last else (
            shape[0], shape[1], shape[2])

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = obs.float()
        if self.channels_last:
            x = x.permute(0, 3, 1, 2)
        return self.linear(self.cnn((x - self.low) / self.span))  # type: ignore[no-any-return]


class DictEncoder(Encoder):
    """One encoder per key of a ``Dict`` space (sorted keys), features concatenated.

    Args:
        space: The ``Dict`` space (one level of ``Box``, ``Discrete`` and ``MultiBinary``).
        normalize_images: Scale image pixels (:class:`ImageEncoder`). Default True.
    """

    def __init__(self, space: gym.spaces.Dict, *, normalize_images: bool = True) -> None:
        super().__init__()
        self.keys = sorted(space.spaces)
        encoders = [make_encoder(space[key], normalize_images=normalize_images)
                    for key in self.keys]
        self.out_features = sum(encoder.out_features for encoder in encoders)
        self.encoders = nn.ModuleList(encoders)

    def forward(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        return torch.cat([encoder(obs[key]) for key, encoder
                          in zip(self.keys, self.encoders, strict=True)], dim=1)


def make_encoder(space: gym.Space[Any], *, normalize_images: bool = True) -> Encoder:
    """The encoder of ``space``'s observations (see the module's docstring);
    ``normalize_images`` scales image pixels to ``[0, 1]`` (:class:`ImageEncoder`). A space
    :func:`check_observation_space` refuses raises :class:`SpaceError`."""
    if isinstance(space, gym.spaces.Dict):
        return DictEncoder(space, normalize_images=normalize_images)
    if isinstance(space, gym.spaces.Discrete):
        return OneHotEncoder(space)
    if isinstance(space, gym.spaces.Box) and len(space.shape) == 3:
        return ImageEncoder(space, normalize_images=normalize_images)
    if isinstance(space, (gym.spaces.Box, gym.spaces.MultiBinary)):
        return FlatEncoder(tuple(space.shape))
    raise SpaceError(f"No encoder for {space}: encoders take Box, Discrete and MultiBinary "
                     "observations and Dict spaces of them.")


def orthogonal(encoder: Encoder, gain: float) -> Encoder:
    """``encoder`` with orthogonal weights of ``gain`` and zero biases in its convolutions and
    linear layers (PPO's initialisation; CleanRL's ``layer_init``)."""
    for module in encoder.modules():
        if isinstance(module, (nn.Conv2d, nn.Linear)) and module.bias is not None:
            nn.init.orthogonal_(module.weight, gain)
            nn.init.zeros_(module.bias)
    return encoder


def is_flat(space: gym.Space[Any]) -> bool:
    """True for the observations :class:`FlatEncoder` takes: a ``Box`` that is not an image."""
    return isinstance(space, gym.spaces.Box) and len(space.shape) != 3


def flattenable(space: gym.Space[Any]) -> bool:
    """Whether ``gymnasium.wrappers.FlattenObservation`` can flatten ``space``."""
    try:
        return bool(space.is_np_flattenable)
    except NotImplementedError:  # MiniGrid's MissionSpace, custom spaces
        return False


def check_observation_space(agent: str, space: gym.Space[Any]) -> None:
    """Raise :class:`SpaceError` unless ``space`` is a ``Box`` (a vector or an image) or a
    ``Dict`` of ``Box``, ``Discrete`` and ``MultiBinary`` parts, naming what to do: the key
    to drop (and the wrapper that drops it) for a ``Dict``; flattening only where every part
    can be flattened (MiniGrid's ``mission`` text cannot)."""
    if isinstance(space, gym.spaces.Box):
        return
    if isinstance(space, gym.spaces.Dict):
        keys = sorted(space.spaces)
        bad = [key for key in keys if not isinstance(space[key], DICT_PARTS)]
        if not bad:
            return
        keep = [key for key in keys if key not in bad]
        fixes = []
        if "mission" in bad or any(type(space[key]).__module__.startswith("minigrid")
                                   for key in bad):
            fixes.append("minigrid.wrappers.ImgObsWrapper(env) keeps MiniGrid's image alone")
        if keep:
            fixes.append(f"gymnasium.wrappers.FilterObservation(env, {keep!r}) keeps the keys "
                         f"{agent} encodes")
        if flattenable(space):
            fixes.append("gymnasium.wrappers.FlattenObservation(env) makes one vector of it all")
        advice = ("Drop it: " + "; or ".join(fixes) if fixes
                  else "Turn the observation into a Box with a gymnasium.ObservationWrapper")
        raise SpaceError(
            f"{agent} cannot encode the observation key {bad[0]!r}: {space[bad[0]]} (it "
            "encodes a Dict's Box, Discrete and MultiBinary parts). " + advice + ".")
    advice = ("One-hot encode or flatten them: gymnasium.wrappers.FlattenObservation(env) "
              "(a Discrete observation becomes a one-hot vector)" if flattenable(space)
              else "Turn them into a Box with a gymnasium.ObservationWrapper")
    raise SpaceError(f"{agent} takes Box observations (vectors or images) or a Dict of them; "
                     f"got {space}. {advice}.")
