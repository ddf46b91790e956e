"""Observation encoders, chosen from the observation space by :func:`make_encoder`: what turns
a batch of observations (in their storage dtype) into the float feature vectors ``[B,
out_features]`` the agents' MLPs take.

- A ``Box`` that is not read as an image (a vector; a grid, such as gymnasium-2048's 4x4x16
  board): :class:`FlatEncoder`, no parameters.
- An image (a 3-D ``uint8`` ``Box`` with bounds 0..255 and 1, 3 or 4 channels first or last,
  as Stable-Baselines3 decides: :mod:`~rltrain.agents.nn.observation_spaces`), or any 3-D ``Box``
  with ``encoder='cnn'``: :class:`ImageEncoder`, a CNN that scales the pixels and puts the
  channels first. The Nature-DQN CNN for images of 36 px a side or more (Atari's 84x84), the
  MiniGrid documentation's small CNN for smaller grids (MiniGrid's 7x7 views). With
  ``encoder='mlp'`` an image is flattened instead (scaled as the CNN would).
- A ``Discrete`` (Taxi's, FrozenLake's state index): :class:`OneHotEncoder`; a
  ``MultiDiscrete``: :class:`MultiOneHotEncoder`; a ``MultiBinary``: flat. They are stored as
  indices, and one-hot only here, on the device.
- A ``Dict``: :class:`DictEncoder`, one encoder per key (sorted), their features concatenated.

The agents build ``encoder -> MLP`` (DQN's Q-network, PPO's actor-critic, SAC's actor and
critics); :func:`check_observation_space` refuses what no encoder takes, naming the fix, and
:func:`encoder_lines` says which encoder each part of the observation got (the model
summary's first lines).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from rltrain.agents.base import SpaceError
from rltrain.agents.nn.observation_spaces import channels_last as guess_channels_last
from rltrain.agents.nn.observation_spaces import check_observation_space as check_observation_space
from rltrain.agents.nn.observation_spaces import flattenable as flattenable
from rltrain.agents.nn.observation_spaces import image_axes, not_an_image
from rltrain.agents.nn.observation_spaces import is_flat as is_flat

#: Each side, in pixels, from which an image gets the Nature CNN (its three convolutions
#: need 36: 36 -> 8 -> 3 -> 1).
NATURE_MIN_SIDE = 36


class Encoder(nn.Module):
    """An observation encoder: ``forward(obs) -> [B, out_features]`` float features.

    Attributes:
        out_features: Features per observation.
        description: What it does to which space, in words (set by :func:`make_encoder`):
            ``"image (84x84x4 uint8, channels last) -> NatureCNN (512 features)"``.
        note: A remark for the console after it (why a 3-D ``Box`` is not an image), or "".
    """

    out_features: int
    description: str = ""
    note: str = ""

    def lines(self) -> list[str]:
        """The model summary's line for this encoder, which feeds the agent's MLP (none for
        one made without :func:`make_encoder`, such as a network's flat input of a size)."""
        return [f"encoder: {self.description} -> MLP{self.note}"] if self.description else []


class FlatEncoder(Encoder):
    """Observations flattened to ``[B, prod(shape)]`` float32 vectors, divided by ``scale``.

    Args:
        shape: One observation's shape.
        scale: What the values are divided by: 255 for an image flattened with
            ``encoder='mlp'``, 1 (unscaled) otherwise. Default 1.
    """

    def __init__(self, shape: tuple[int, ...], scale: float = 1.0) -> None:
        super().__init__()
        self.out_features = int(np.prod(shape))
        self.scale = float(scale)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if self.scale != 1.0:
            return obs.reshape(obs.shape[0], -1).float() / self.scale
        if obs.dim() == 2 and obs.dtype == torch.float32:
            # Already flat float32 vectors: two no-op calls saved (their cost:
            # docs/benchmarks.md, "Figures behind implementation choices").
            return obs
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


class MultiOneHotEncoder(Encoder):
    """A ``MultiDiscrete(nvec, start)`` observation as its components' one-hot vectors,
    concatenated: ``[B, sum(nvec)]``.

    Args:
        space: The ``MultiDiscrete`` space (any shape; read flattened).
    """

    shift: torch.Tensor

    def __init__(self, space: gym.spaces.MultiDiscrete) -> None:
        super().__init__()
        sizes = np.asarray(space.nvec, np.int64).reshape(-1)
        self.out_features = int(sizes.sum())
        offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        shift = offsets - np.asarray(space.start, np.int64).reshape(-1)
        self.register_buffer("shift", torch.as_tensor(shift), persistent=False)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        index = obs.reshape(obs.shape[0], -1).long() + self.shift
        return F.one_hot(index, self.out_features).sum(dim=1).float()


def _scaling(space: gym.spaces.Box, last: bool,
             normalize: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """``(low, span)`` mapping pixels to ``[0, 1]``, channel-first: a bounded ``Box`` by its
    bounds (an image's 0..255 by 255, SB3's and CleanRL's convention), an unbounded one (or
    any, without ``normalize``) not at all. Scalars where the bounds are the same
    everywhere."""
    if not normalize:
        return torch.tensor(0.0), torch.tensor(1.0)
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
    """A CNN over a 3-D ``Box``: ``[B, H, W, C]`` (or ``[B, C, H, W]``) in the storage dtype
    -> ``[B, out_features]``.

    Pixels are cast to float on the device and scaled to ``[0, 1]`` by the space's bounds
    (``uint8`` images by 255; an unbounded ``Box``, or any with ``normalize_images=False``, not
    at all), channels put first. Images of at least 36 px a side get the
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
        channels_last: Whether the channels are the last axis; None guesses it from the
            shape (:func:`~rltrain.agents.nn.observation_spaces.channels_last`). Default None.
    """

    low: torch.Tensor
    span: torch.Tensor

    def __init__(self, space: gym.spaces.Box, *, normalize_images: bool = True,
                 channels_last: bool | None = None) -> None:
        super().__init__()
        shape = tuple(int(n) for n in space.shape)
        self.channels_last = (guess_channels_last(shape) if channels_last is None
                              else channels_last)
        c, h, w = self.chw(shape)
        low, span = _scaling(space, self.channels_last, normalize_images)
        self.register_buffer("low", low)
        self.register_buffer("span", span)
        layers: list[nn.Module] = []
        nature = min(h, w) >= NATURE_MIN_SIDE
        self.cnn_name = "NatureCNN" if nature else "SmallCNN"
        if nature:
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
        # Channels last (laid out while still in the storage dtype, a byte an element for
        # images): oneDNN's convolutions on the CPU take that layout (a Nature-CNN gradient step
        # on 256 Atari stacks about 23% faster, docs/benchmarks.md "Atari"); scaled into one new
        # float tensor.
        x = (obs.permute(0, 3, 1, 2) if self.channels_last
             else obs.contiguous(memory_format=torch.channels_last))
        x = torch.sub(x.float(), self.low).div_(self.span)
        return self.linear(self.cnn(x))  # type: ignore[no-any-return]


class DictEncoder(Encoder):
    """One encoder per key of a ``Dict`` space (sorted keys), features concatenated.

    Args:
        space: The ``Dict`` space (one level of ``Box``, ``Discrete``, ``MultiDiscrete`` and
            ``MultiBinary``).
        normalize_images: Scale image pixels (:class:`ImageEncoder`). Default True.
        encoder: The agents' ``encoder`` setting, for each part: ``auto``, ``mlp`` or
            ``cnn``. Default ``auto``.
    """

    def __init__(self, space: gym.spaces.Dict, *, normalize_images: bool = True,
                 encoder: str = "auto") -> None:
        super().__init__()
        self.keys = sorted(space.spaces)
        encoders = [make_encoder(space[key], normalize_images=normalize_images,
                                 encoder=encoder) for key in self.keys]
        self.out_features = sum(part.out_features for part in encoders)
        self.encoders = nn.ModuleList(encoders)
        self.description = (f"Dict of {len(self.keys)} keys, concatenated "
                            f"({self.out_features} features)")

    def forward(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        return torch.cat([encoder(obs[key]) for key, encoder
                          in zip(self.keys, self.encoders, strict=True)], dim=1)

    def lines(self) -> list[str]:
        """A line per key, then the concatenation's."""
        parts = [f"encoder[{key!r}]: {part.description}{part.note}"
                 for key, part in zip(self.keys, self.encoders, strict=True)]
        return [*parts, f"encoder: {self.description} -> MLP"]


def make_encoder(space: gym.Space[Any], *, normalize_images: bool = True,
                 encoder: str = "auto") -> Encoder:
    """The encoder of ``space``'s observations (see the module's docstring), described for
    the model summary (:attr:`Encoder.description`). ``normalize_images`` scales image pixels
    to ``[0, 1]``; ``encoder`` is the agents' setting: ``auto`` (a CNN for images), ``mlp``
    (flatten every 3-D ``Box``) or ``cnn`` (a CNN for every 3-D ``Box``). A space
    :func:`check_observation_space` refuses raises :class:`SpaceError`."""
    if isinstance(space, gym.spaces.Dict):
        return DictEncoder(space, normalize_images=normalize_images, encoder=encoder)
    if isinstance(space, gym.spaces.Discrete):
        return _described(OneHotEncoder(space), f"one-hot ({space}")
    if isinstance(space, gym.spaces.MultiDiscrete):
        return _described(MultiOneHotEncoder(space), f"one-hot per component ({space}")
    if isinstance(space, gym.spaces.MultiBinary):
        return _described(FlatEncoder(tuple(space.shape)), f"flat ({space}")
    if isinstance(space, gym.spaces.Box):
        return _box_encoder(space, normalize_images, encoder)
    raise SpaceError(f"No encoder for {space}: encoders take Box, Discrete, MultiDiscrete and "
                     "MultiBinary observations and Dict spaces of them.")


def _box_encoder(space: gym.spaces.Box, normalize_images: bool, encoder: str) -> Encoder:
    """A ``Box``'s encoder under the ``encoder`` setting, described."""
    dims = "x".join(str(n) for n in space.shape) or "scalar"
    what = f"{dims} {space.dtype}"
    last = image_axes(space, encoder)
    if last is not None:
        image = ImageEncoder(space, normalize_images=normalize_images, channels_last=last)
        forced = ", agent.encoder=cnn" if encoder == "cnn" else ""
        axes = "channels last" if last else "channels first"
        image.description = (f"image ({what}, {axes}{forced}) -> {image.cnn_name} "
                             f"({image.out_features} features)")
        return image
    why = not_an_image(space)
    scale = 255.0 if why is None and normalize_images else 1.0  # an image flattened by mlp
    flat = FlatEncoder(tuple(space.shape), scale=scale)
    if why is None:
        flat.note = "; an image flattened by agent.encoder=mlp"
        what += " / 255" if scale != 1.0 else ""
    elif len(space.shape) == 3 and encoder == "auto":
        flat.note = f"; not an image ({why}): agent.encoder=cnn reads it with a CNN"
    return _described(flat, f"flat ({what}")


def _described(encoder: Encoder, start: str) -> Encoder:
    """``encoder`` described as ``start`` (``"flat (4x4x16 uint8"``) and its features."""
    encoder.description = f"{start} -> {encoder.out_features} features)"
    return encoder


def encoder_lines(model: nn.Module) -> list[str]:
    """What :meth:`Encoder.lines` says of each encoder in ``model`` (an agent), once each:
    the twin networks of an agent (a target network, SAC's actor and critics) encode the
    same space the same way."""
    lines: list[str] = []
    inside: set[int] = set()
    for module in model.modules():
        if isinstance(module, Encoder) and id(module) not in inside:
            inside.update(id(part) for part in module.modules())
            lines += [line for line in module.lines() if line not in lines]
    return lines


def orthogonal(encoder: Encoder, gain: float) -> Encoder:
    """``encoder`` with orthogonal weights of ``gain`` and zero biases in its convolutions and
    linear layers (PPO's initialisation; CleanRL's ``layer_init``)."""
    for module in encoder.modules():
        if isinstance(module, (nn.Conv2d, nn.Linear)) and module.bias is not None:
            nn.init.orthogonal_(module.weight, gain)
            nn.init.zeros_(module.bias)
    return encoder
