"""A resumed run: its counters restored before the Start event, then every part the checkpoint
holds loaded back (what a checkpoint holds: :mod:`rltrain.checkpoint.state`)."""

from __future__ import annotations

import dataclasses
import pickle
from collections.abc import Mapping

from rltrain.agents.base import LearningAgent
from rltrain.checkpoint.state import Stateful
from rltrain.strategies.components import RLComponents


def restore_progress(components: RLComponents) -> None:
    """Set ``components.progress`` to the counters saved in ``components.checkpoint``."""
    if components.checkpoint is None:
        raise ValueError("restore_progress needs components.checkpoint (a file to resume from).")
    path = components.checkpoint
    saved = components.saved_state().get("progress")
    fields = [f.name for f in dataclasses.fields(components.progress)]
    if not isinstance(saved, dict) or sorted(saved) != sorted(fields) or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in saved.values()):
        raise ValueError(f"{path} has no valid counters ('progress': the counts {fields}); it "
                         "was not written by rltrain, or it was altered.")
    for name in fields:
        setattr(components.progress, name, saved[name])


def resume(components: RLComponents, agent: LearningAgent,
           parts: Mapping[str, Stateful]) -> None:
    """Load every part saved in ``components.checkpoint`` (the counters were restored by the
    strategy template, :func:`restore_progress`, before the Start event), then drop what was
    read (:meth:`~rltrain.strategies.components.RLComponents.release_saved_state`): the replay
    buffer in it can be large."""
    path = components.checkpoint
    if path is None:
        raise ValueError("resume needs components.checkpoint (a file to resume from).")
    state = components.saved_state()
    components.release_saved_state()
    if state.get("agent_class") != type(agent).__name__:
        raise ValueError(
            f"{path} holds a {state.get('agent_class')} checkpoint, not a {type(agent).__name__}."
        )
    missing = [name for name in parts if name not in state]
    if missing:
        raise ValueError(f"{path} has no {', '.join(missing)} state; it was saved by another "
                         "strategy or an older rltrain.")
    for name, part in parts.items():
        try:
            part.load_state_dict(state[name])
        except pickle.UnpicklingError as error:
            raise ValueError(f"{path}: refusing to load its {name} state: {error}") from error
        except ValueError as error:  # the part's own message says what does not match
            raise ValueError(f"{path}: {error}") from error
        except (RuntimeError, KeyError, TypeError, IndexError, AttributeError) as error:
            raise ValueError(f"{path}: its {name} state does not fit this run (saved with other "
                             f"settings or on another environment?): {error}") from error
