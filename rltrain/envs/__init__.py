"""Environments: making them (:mod:`.make`), checking them (:mod:`.checks`), saving their
state (:mod:`.pickling`), stepping them for training (:mod:`.runner`) and evaluation
(:mod:`.evaluator`), and recording videos (:mod:`.video`)."""

from rltrain.envs.make import EnvInit, EnvSpec

__all__ = ["EnvInit", "EnvSpec"]
