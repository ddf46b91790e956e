"""The EventProcessor's dispatch: only the hooks a subscriber overrides, in order, after the
metrics; a strategy's own events to ``on_event``; a misspelt hook warned about."""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path
from typing import Any

import pytest
from conftest import QUIET, episode

from rltrain import DQN, DQNConfig, OffPolicyConfig, OffPolicyStrategy, Trainer
from rltrain.observe import (
    EnvStep,
    EpisodeEnd,
    EvaluationStart,
    EventProcessor,
    EventRecorder,
    Metrics,
    Start,
    Subscriber,
    TrainStep,
)

# --- EventProcessor dispatch -------------------------------------------------------------------


def test_processor_calls_only_the_hooks_a_subscriber_overrides(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    base_calls: list[str] = []

    def base_hook(self: Subscriber, event: Any, metrics: Metrics) -> None:
        base_calls.append(type(event).__name__)

    # If the processor called non-overridden hooks, it would reach these base-class hooks.
    monkeypatch.setattr(Subscriber, "on_train_step", base_hook)
    monkeypatch.setattr(Subscriber, "on_end", base_hook)

    class OnlyEnvSteps(Subscriber):
        def __init__(self) -> None:
            self.seen: list[EnvStep] = []

        def on_env_step(self, event: EnvStep, metrics: Metrics) -> None:
            self.seen.append(event)

    class Inherits(OnlyEnvSteps):
        """Overrides nothing itself: the parent's override must still be called."""

    only, inherits = OnlyEnvSteps(), Inherits()
    processor = EventProcessor([only, inherits])
    processor.emit(Start(total_env_steps=10))
    processor.emit(EnvStep(env_steps=1, vector_steps=1))
    processor.emit(TrainStep(env_steps=1, gradient_steps=1, metrics={"loss": 1.0}))
    processor.emit(EvaluationStart(env_steps=1, episodes=1))
    assert base_calls == []
    assert [e.env_steps for e in only.seen] == [1]
    assert [e.env_steps for e in inherits.seen] == [1]
    # The metrics were updated even though no subscriber handles TrainStep.
    assert processor.metrics.snapshot()["train/loss"] == 1.0


def test_an_env_step_is_heard_by_its_subscribers_or_by_the_metrics_until_their_first() -> None:
    """A run makes an EnvStep event only when :meth:`EventProcessor.hears` says one would
    reach a subscriber or change the metrics."""

    class Episodes(Subscriber):
        def on_episode_end(self, event: EpisodeEnd, metrics: Metrics) -> None: ...

    class Steps(Subscriber):
        def on_env_step(self, event: EnvStep, metrics: Metrics) -> None: ...

    quiet = EventProcessor([Episodes()])
    assert quiet.hears(EnvStep)  # the metrics time the run from its first env step
    quiet.emit(EnvStep(env_steps=1, vector_steps=1))
    assert not quiet.hears(EnvStep)
    assert quiet.hears(EpisodeEnd) and quiet.hears(TrainStep)
    listening = EventProcessor([Steps()])
    listening.emit(EnvStep(env_steps=1, vector_steps=1))
    assert listening.hears(EnvStep)


def test_processor_calls_subscribers_in_order_after_updating_metrics() -> None:
    calls: list[tuple[str, int]] = []

    class Named(Subscriber):
        def __init__(self, name: str) -> None:
            self.name = name

        def on_episode_end(self, event: EpisodeEnd, metrics: Metrics) -> None:
            calls.append((self.name, metrics.snapshot()["rollout/episode_length_last"]))

    processor = EventProcessor([Named("a"), Named("b")])
    processor.emit(Start(total_env_steps=10))
    processor.emit(episode(4, 1.0, 4))
    assert calls == [("a", 4), ("b", 4)]


def test_processor_close_closes_every_subscriber_and_raises_the_first_error() -> None:
    closed: list[str] = []

    class Closing(Subscriber):
        def __init__(self, name: str, fail: bool) -> None:
            self.name, self.fail = name, fail

        def close(self) -> None:
            closed.append(self.name)
            if self.fail:
                raise RuntimeError(self.name)

    processor = EventProcessor([Closing("a", True), Closing("b", False), Closing("c", True)])
    with pytest.raises(RuntimeError, match=r"^a$"):
        processor.close()
    assert closed == ["a", "b", "c"]


def test_an_event_of_a_strategys_own_type_reaches_on_event() -> None:
    @dataclasses.dataclass(frozen=True)
    class RolloutDone:
        env_steps: int

    class Listener(Subscriber):
        def __init__(self) -> None:
            self.seen: list[object] = []

        def on_event(self, event: object, metrics: Metrics) -> None:
            self.seen.append(event)

    listener, recorder = Listener(), EventRecorder()
    processor = EventProcessor([listener, recorder])
    processor.emit(RolloutDone(env_steps=128))
    processor.emit(EnvStep(env_steps=1, vector_steps=1))
    assert listener.seen == [RolloutDone(env_steps=128)]  # rltrain's own events keep their hooks
    assert [type(e) for e in recorder.events] == [EnvStep]


class MisspeltHook(Subscriber):
    """Means to count episodes, but ``on_episode_ends`` is no hook: nothing calls it."""

    def __init__(self) -> None:
        self.episodes = 0

    def on_episode_ends(self, event: EpisodeEnd, metrics: Metrics) -> None:
        self.episodes += 1

    def on_something_else_entirely(self) -> None:
        """Named like a hook, close to none."""


def test_a_misspelt_hook_is_warned_about_naming_the_closest_hook(tmp_path: Path) -> None:
    # It used to be silently never called.
    subscriber = MisspeltHook()
    trainer = Trainer(num_steps=50, strategy=OffPolicyStrategy(OffPolicyConfig(warmup_steps=10)),
                      eval_interval=None, run_dir=tmp_path, callbacks=[subscriber], **QUIET)
    with pytest.warns(UserWarning) as caught:
        trainer.fit("CartPole-v1", DQN(DQNConfig(hidden_sizes=[16])))
    messages = {str(w.message): w.filename for w in caught}
    assert messages.pop(
        "MisspeltHook.on_episode_ends is not a subscriber hook, so no event calls it. Did you "
        "mean on_episode_end? (Events of a strategy's own types reach on_event.)") == __file__
    (other,) = [m for m in messages if "on_something_else_entirely" in m]
    assert "The hooks are on_checkpoint, on_end, on_env_step, on_episode_end," in other
    assert subscriber.episodes == 0


def test_a_subscriber_of_real_hooks_only_gets_no_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        EventProcessor([EventRecorder(), Subscriber()])
