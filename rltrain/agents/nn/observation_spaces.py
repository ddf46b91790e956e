"""Which observation spaces the encoders take, which 3-D ``Box`` is an image, and what a
refused space's message advises.

An image is decided as Stable-Baselines3 decides it (``is_image_space``): a 3-D ``uint8``
``Box`` with bounds 0 and 255 and 1, 3 or 4 channels on its last axis (``H x W x C``) or its
first (``C x H x W``). Any other 3-D ``Box`` (gymnasium-2048's ``Box(0, 1, (4, 4, 16),
uint8)`` board of one-hot planes, a float grid) is a grid of numbers, flattened into the MLP.
The agents' ``encoder`` setting overrides the rule: ``auto`` (the rule), ``mlp`` (every 3-D
``Box`` flattened) or ``cnn`` (every 3-D ``Box`` through the CNN, its channel axis guessed
from the shape: :func:`channels_last`).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from rltrain.agents.base import SpaceError
from rltrain.settings.base import setting

#: The values of the agents' ``encoder`` setting.
ENCODER_CHOICES = ("auto", "mlp", "cnn")
#: Channel counts of an image (grey, RGB, RGBA or a stack of 4 frames), as SB3's.
IMAGE_CHANNELS = (1, 3, 4)
#: Spaces an encoder takes, at the top level or as a ``Dict``'s parts.
ENCODED = (gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiDiscrete,
           gym.spaces.MultiBinary)
#: The same, in words.
ENCODED_NAMES = "Box, Discrete, MultiDiscrete and MultiBinary"


def encoder_setting() -> Any:
    """A config's ``encoder`` setting: ``"auto"`` by default, one of :data:`ENCODER_CHOICES`."""
    return setting("auto", choices=ENCODER_CHOICES, says=(
        "'auto' (a CNN for images, as Stable-Baselines3 decides them), 'mlp' (flatten every "
        "observation) or 'cnn' (a CNN for every 3-D Box)"))


def _bounds(space: gym.spaces.Box) -> str:
    low, high = np.unique(space.low), np.unique(space.high)
    if len(low) == 1 and len(high) == 1:
        return f"bounds {low[0]:g}..{high[0]:g}"
    return "bounds that differ between cells"


def not_an_image(space: gym.Space[Any]) -> str | None:
    """Why ``space`` is not an image, in words; None when it is one (SB3's
    ``is_image_space``: a 3-D ``uint8`` ``Box``, bounds 0..255, 1, 3 or 4 channels first or
    last)."""
    if not isinstance(space, gym.spaces.Box) or len(space.shape) != 3:
        return "not a 3-D Box"
    if space.dtype != np.uint8:
        return f"{space.dtype}, not uint8"
    if (space.low != 0).any() or (space.high != 255).any():
        return f"{_bounds(space)}, not 0..255"
    first, last = space.shape[0], space.shape[2]
    if first not in IMAGE_CHANNELS and last not in IMAGE_CHANNELS:
        return f"{first} and {last} on the first and last axes, not 1, 3 or 4 channels"
    return None


def channels_last(shape: tuple[int, ...]) -> bool:
    """Whether a 3-D grid of ``shape`` read by ``encoder='cnn'`` is ``HxWxC`` (True) or
    ``CxHxW``, guessed from its sides: the two equal ones are the square grid (a 4x4x16 2048
    board and a 7x7x20 one-hot grid are channel-last, an 8x84x84 frame stack channel-first);
    without such a pair, channel-last when the last side is 1..4 (RGB, grey, RGBA), else
    channel-first when the first is, else channel-last (Gymnasium's convention)."""
    if shape[0] == shape[1] != shape[2]:
        return True
    if shape[1] == shape[2] != shape[0]:
        return False
    return shape[2] <= 4 or shape[0] > 4


def image_axes(space: gym.Space[Any], encoder: str = "auto") -> bool | None:
    """How the CNN reads ``space`` under the ``encoder`` setting: True for channels last,
    False for channels first, None when it is flattened instead (not a 3-D ``Box``, not an
    image under ``auto``, or ``mlp``). An image under ``auto`` has its channels last when its
    last side is 1, 3 or 4."""
    if not isinstance(space, gym.spaces.Box) or len(space.shape) != 3 or encoder == "mlp":
        return None
    if encoder == "cnn":
        return channels_last(tuple(int(n) for n in space.shape))
    return space.shape[2] in IMAGE_CHANNELS if not_an_image(space) is None else None


def is_flat(space: gym.Space[Any], encoder: str = "auto") -> bool:
    """True for the observations a flat encoder takes unscaled: a ``Box`` that is neither read
    by the CNN nor an image (an image flattened by ``encoder='mlp'`` is scaled)."""
    return (isinstance(space, gym.spaces.Box) and image_axes(space, encoder) is None
            and not_an_image(space) is not None)


def check_normalizable(agent: str, space: gym.Space[Any], encoder: str = "auto") -> None:
    """Raise :class:`SpaceError` unless running mean-and-variance normalisation (PPO's
    ``normalize_observations``) fits ``space``: numbers the flat encoder takes unscaled, not
    pixels, indices or a ``Dict``."""
    if is_flat(space, encoder):
        return
    indices = (gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)
    why = (f"a {type(space).__name__} observation is encoded as 0s and 1s (one-hot), which "
           "need no normalising" if isinstance(space, indices)
           else "the image encoder scales pixels to [0, 1] itself")
    raise SpaceError(f"{agent}'s normalize_observations takes vector observations; got {space}. "
                     f"Leave it off: {why}.")


def flattenable(space: gym.Space[Any]) -> bool:
    """Whether ``gymnasium.wrappers.FlattenObservation`` can flatten ``space``."""
    try:
        return bool(space.is_np_flattenable)
    except NotImplementedError:  # MiniGrid's MissionSpace, custom spaces
        return False


def cli(path: str, keys: str = "") -> str:
    """How to apply the wrapper at import ``path`` (with its ``keys``, YAML) from the command
    line."""
    body = f"_target_: {path}" + (f", {keys}" if keys else "")
    return f"from the command line 'env.wrappers=[{{{body}}}]'"


def check_observation_space(agent: str, space: gym.Space[Any], encoder: str = "auto") -> None:
    """Raise :class:`SpaceError` unless ``space`` is a ``Box`` (a vector, a grid or an image),
    ``Discrete``, ``MultiDiscrete`` or ``MultiBinary``, or a ``Dict`` of them, naming what to
    do (with the command-line form of the wrapper that does it); and unless the ``encoder``
    setting fits it (``cnn`` needs a 3-D ``Box`` to read)."""
    if isinstance(space, gym.spaces.Dict):
        _check_dict(agent, space)
        parts = list(space.spaces.values())
    elif isinstance(space, ENCODED):
        parts = [space]
    else:
        raise SpaceError(f"{agent} takes {ENCODED_NAMES} observations, or a Dict of them; got "
                         f"{space}. {_unsupported_advice(space)}.")
    if encoder == "cnn" and not any(image_axes(part, "cnn") is not None for part in parts):
        raise SpaceError(f"{agent}'s encoder=cnn reads 3-D Box observations (images, grids of "
                         f"channels); got {space}, which has none. Leave the encoder to the "
                         "space (agent.encoder=auto, the default).")


def _unsupported_advice(space: gym.Space[Any]) -> str:
    if flattenable(space):
        return ("Flatten it into a one-hot or numeric vector with gymnasium.wrappers."
                f"FlattenObservation(env), {cli('gymnasium.wrappers.FlattenObservation')} (its "
                "envs cannot be pickled, so a resumed run is not exact)")
    return ("Turn it into a Box with a gymnasium.ObservationWrapper of your own, "
            f"{cli('my_wrappers.ToBox')} (a module in the current directory is found)")


def _check_dict(agent: str, space: gym.spaces.Dict) -> None:
    """The key of a ``Dict`` no encoder takes, with the wrappers that drop it."""
    keys = sorted(space.spaces)
    bad = [key for key in keys if not isinstance(space[key], ENCODED)]
    if not bad:
        return
    keep = [key for key in keys if key not in bad]
    fixes = []
    if "mission" in bad or any(type(space[key]).__module__.startswith("minigrid")
                               for key in bad):
        fixes.append("minigrid.wrappers.ImgObsWrapper(env) keeps MiniGrid's image alone ("
                     f"{cli('minigrid.wrappers.ImgObsWrapper')})")
    if keep:
        wrapper = cli("gymnasium.wrappers.FilterObservation", f"filter_keys: [{', '.join(keep)}]")
        fixes.append(f"gymnasium.wrappers.FilterObservation(env, {keep!r}) keeps the keys "
                     f"{agent} encodes ({wrapper})")
    if flattenable(space):
        fixes.append("gymnasium.wrappers.FlattenObservation(env) makes one vector of it all ("
                     f"{cli('gymnasium.wrappers.FlattenObservation')})")
    advice = ("Drop it: " + "; or ".join(fixes) if fixes
              else "Turn the observation into a Box with a gymnasium.ObservationWrapper")
    raise SpaceError(f"{agent} cannot encode the observation key {bad[0]!r}: {space[bad[0]]} "
                     f"(it encodes a Dict's {ENCODED_NAMES} parts). " + advice + ".")
