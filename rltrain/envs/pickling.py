"""Unpickling with an allow-list, for the environment states inside checkpoints.

``pickle.loads`` can run any code a file names. Checkpoints keep tensors for everything they can
(loaded with ``torch.load(weights_only=True)``); environment objects are the exception, and are
read here, where a pickle may only name the classes of the environment being restored and the
NumPy internals that arrays and generators need.
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Iterable
from typing import Any

import gymnasium as gym

#: What pickled NumPy arrays, scalars and generators refer to (NumPy 1.x and 2.x names).
NUMPY_GLOBALS = frozenset({
    ("numpy", "dtype"),
    ("numpy", "ndarray"),
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "scalar"),
    ("numpy.random._pickle", "__bit_generator_ctor"),
    ("numpy.random._pickle", "__generator_ctor"),
    ("numpy.random._pickle", "__randomstate_ctor"),
    ("numpy.random._pcg64", "PCG64"),
    ("numpy.random._mt19937", "MT19937"),
    ("numpy.random.bit_generator", "SeedSequence"),
    ("numpy.random.bit_generator", "__pyx_unpickle_SeedSequence"),
    ("gymnasium.envs.registration", "EnvSpec"),
})


class ForbiddenGlobal(pickle.UnpicklingError):
    """A pickle named a global outside the allow-list."""


class _AllowListUnpickler(pickle.Unpickler):
    def __init__(self, data: bytes, allowed: frozenset[tuple[str, str]]) -> None:
        super().__init__(io.BytesIO(data))
        self.allowed = allowed

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in self.allowed:
            raise ForbiddenGlobal(
                f"the pickle names {module}.{name}, which a pickle of the environment being "
                "restored does not; refusing to load it"
            )
        return super().find_class(module, name)


class _GlobalsRecorder(pickle.Unpickler):
    def __init__(self, data: bytes) -> None:
        super().__init__(io.BytesIO(data))
        self.names: set[tuple[str, str]] = set()

    def find_class(self, module: str, name: str) -> Any:
        self.names.add((module, name))
        return super().find_class(module, name)


def env_classes(envs: Iterable[gym.Env[Any, Any]]) -> frozenset[tuple[str, str]]:
    """The globals a pickle of ``envs`` names: the classes of their wrappers, spaces and state.

    ``envs`` are freshly made by the program itself, so pickling and reading them back here runs
    only their own classes; a checkpoint's pickle may then name nothing else (a wrapper's
    ``deque`` or running statistics are allowed because the live wrapper has them too).
    """
    recorder = _GlobalsRecorder(pickle.dumps(list(envs)))
    recorder.load()
    return frozenset(recorder.names)


def loads(data: bytes, allowed: frozenset[tuple[str, str]]) -> Any:
    """Unpickle ``data``, refusing any global not in ``allowed`` or :data:`NUMPY_GLOBALS`."""
    return _AllowListUnpickler(data, allowed | NUMPY_GLOBALS).load()
