"""Dreamer: a world model learned from replayed sequences, and an actor-critic learned in its
imagination. ``world_model.py`` holds the RSSM and Eq. 10, ``behavior.py`` the imagination,
λ-returns and the actor, ``agent.py`` the training step and the recurrent policy."""

from rltrain.agents.dreamer.agent import Dreamer, DreamerConfig, DreamerPolicy

__all__ = ["Dreamer", "DreamerConfig", "DreamerPolicy"]
