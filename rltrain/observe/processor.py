"""Dispatch of events to metrics, renderers and user subscribers."""

from __future__ import annotations

import difflib
import warnings
from collections.abc import Callable, Iterable
from typing import Any

from rltrain.errors import user_stacklevel
from rltrain.observe.events import (
    EVENT_TYPES,
    Checkpoint,
    End,
    EnvStep,
    EpisodeEnd,
    EvaluationEnd,
    EvaluationStart,
    EvaluationStep,
    Interrupted,
    Start,
    TrainStep,
    hook_name,
)
from rltrain.observe.metrics import Metrics
from rltrain.runtime.interrupt import Interrupter


class Subscriber:
    """Base class for anything that listens to training events.

    Override the hooks you need; each receives the event and the run's live :class:`Metrics`.
    Hooks left as they are cost nothing: the processor only calls overridden ones. Renderers and
    callbacks are subscribers. A subscriber does not steer training, but it can end it:
    :meth:`request_stop` asks the run to stop after the current step (the checkpoint is saved
    and the summary names the reason).
    """

    #: The run's stop request; the Trainer sets it before the run starts.
    interrupter: Interrupter | None = None

    def request_stop(self, reason: str) -> None:
        """Ask the run to stop after the current step, with ``reason`` in its summary."""
        if self.interrupter is None:
            raise RuntimeError(f"{type(self).__name__} is not attached to a run: pass it to "
                               "Trainer(callbacks=[...]) or set its interrupter.")
        self.interrupter.stop(reason)

    def on_start(self, event: Start, metrics: Metrics) -> None:
        """Training starts."""

    def on_env_step(self, event: EnvStep, metrics: Metrics) -> None:
        """One vector step was taken (called once per vector step: keep it cheap)."""

    def on_episode_end(self, event: EpisodeEnd, metrics: Metrics) -> None:
        """A training episode ended (terminated or truncated)."""

    def on_train_step(self, event: TrainStep, metrics: Metrics) -> None:
        """A gradient step finished."""

    def on_evaluation_start(self, event: EvaluationStart, metrics: Metrics) -> None:
        """Evaluation episodes begin."""

    def on_evaluation_step(self, event: EvaluationStep, metrics: Metrics) -> None:
        """The evaluation took a vector step (called once per evaluation vector step)."""

    def on_evaluation_end(self, event: EvaluationEnd, metrics: Metrics) -> None:
        """Evaluation finished."""

    def on_checkpoint(self, event: Checkpoint, metrics: Metrics) -> None:
        """A checkpoint was written."""

    def on_interrupted(self, event: Interrupted, metrics: Metrics) -> None:
        """The loop stopped early on a stop request."""

    def on_end(self, event: End, metrics: Metrics) -> None:
        """Training ended; the summary is in ``event.summary``."""

    def on_event(self, event: Any, metrics: Metrics) -> None:
        """An event of a type a strategy defines itself (not one of rltrain's): the fallback
        hook, so a strategy's own events reach subscribers without a hook of their own."""

    def close(self) -> None:
        """Release files and terminals. Called once when the processor closes."""


Handler = Callable[[Any, Metrics], None]

#: Every hook a subscriber can override: one per event type, and the fallback ``on_event``.
HOOKS = frozenset({hook_name(t) for t in EVENT_TYPES} | {"on_event"})


def check_hooks(subscriber: Subscriber) -> None:
    """Warn about each method of ``subscriber`` named like a hook (``on_...``) that is none:
    no event would ever call it (a misspelt ``on_episode_ends``). The warning names the
    closest hook."""
    cls = type(subscriber)
    for name in sorted(n for n in dir(cls) if n.startswith("on_") and n not in HOOKS):
        if not callable(getattr(cls, name)):
            continue
        close = difflib.get_close_matches(name, sorted(HOOKS), n=1, cutoff=0.6)
        hint = (f"Did you mean {close[0]}?" if close
                else f"The hooks are {', '.join(sorted(HOOKS))}.")
        warnings.warn(
            f"{cls.__name__}.{name} is not a subscriber hook, so no event calls it. {hint} "
            "(Events of a strategy's own types reach on_event.)", UserWarning,
            stacklevel=user_stacklevel())


class EventProcessor:
    """Updates :class:`Metrics` from each event, then calls the subscribers' hooks in order.

    Args:
        subscribers: Renderers and callbacks, called in the order given.
        metrics: The metrics to update. Default: a new :class:`Metrics` with a 100-episode window.
    """

    def __init__(
        self, subscribers: Iterable[Subscriber] = (), *, metrics: Metrics | None = None
    ) -> None:
        self.metrics = metrics if metrics is not None else Metrics()
        self.subscribers: list[Subscriber] = []
        self._handlers: dict[type, list[Handler]] = {t: [] for t in EVENT_TYPES}
        self._fallback: list[Handler] = []
        for subscriber in subscribers:
            self.add(subscriber)

    def add(self, subscriber: Subscriber) -> None:
        """Register a subscriber; only the hooks it overrides are called. A method named like
        a hook that is none (``on_episode_ends``) is warned about (:func:`check_hooks`)."""
        check_hooks(subscriber)
        self.subscribers.append(subscriber)
        for event_type in EVENT_TYPES:
            name = hook_name(event_type)
            if getattr(type(subscriber), name, None) is getattr(Subscriber, name):
                continue
            hook = getattr(subscriber, name, None)
            if hook is not None:
                self._handlers[event_type].append(hook)
        if getattr(type(subscriber), "on_event", None) is not Subscriber.on_event:
            self._fallback.append(subscriber.on_event)

    def emit(self, event: Any) -> None:
        """Update the metrics from ``event``, then pass it to every subscriber that handles it
        (an event of a type of the strategy's own goes to their ``on_event``)."""
        self.metrics.update(event)
        for handler in self._handlers.get(type(event), self._fallback):
            handler(event, self.metrics)

    def hears(self, event_type: type) -> bool:
        """Whether an event of ``event_type`` would reach a subscriber or change the metrics:
        a caller may skip making one that would not (an :class:`EnvStep` every vector step
        costs nothing when no subscriber listens)."""
        return bool(self._handlers.get(event_type, self._fallback)) or self.metrics.hears(
            event_type)

    def close(self) -> None:
        """Close every subscriber (flush files, close progress bars), even if one fails."""
        errors: list[BaseException] = []
        for subscriber in self.subscribers:
            try:
                subscriber.close()
            except Exception as error:
                errors.append(error)
        if errors:
            raise errors[0]
