"""Loaded by every docs snippet that tests/docs/test_doc_snippets.py runs (this folder is first on
the
subprocess' PYTHONPATH); rltrain itself never reads RLTRAIN_DOCS_QUICK.

It shortens what a snippet asks for, so that the docs' examples run in seconds: every
``rltrain.Trainer`` (from Python, a config or the CLI) trains at most ``RLTRAIN_DOCS_QUICK``
env steps (default 300) on one thread, evaluates at most every half of that over at most 2
episodes, and the off-policy strategy warms up for at most a third of it. The snippet's text is
not changed: what runs is what the reader copies, with smaller numbers.
"""

from __future__ import annotations

import functools
import os
from typing import Any

CAP = int(os.environ.get("RLTRAIN_DOCS_QUICK", "0") or 0)


def _shorten() -> None:
    from rltrain.settings.loops import OffPolicyConfig
    from rltrain.trainer.trainer import Trainer

    trainer_init = Trainer.__init__

    @functools.wraps(trainer_init)
    def init(self: Trainer, *args: Any, **kwargs: Any) -> None:
        kwargs["num_steps"] = min(kwargs.get("num_steps", 50_000), CAP)
        interval = kwargs.get("eval_interval", 10_000)
        if interval is not None:
            kwargs["eval_interval"] = min(interval, CAP // 2)
        kwargs["eval_episodes"] = min(kwargs.get("eval_episodes", 10), 2)
        if kwargs.get("checkpoint_interval") is not None:
            kwargs["checkpoint_interval"] = min(kwargs["checkpoint_interval"], CAP // 2)
        kwargs["num_threads"] = 1
        trainer_init(self, *args, **kwargs)

    Trainer.__init__ = init  # type: ignore[method-assign]

    evaluate = Trainer.evaluate

    @functools.wraps(evaluate)
    def short_evaluate(self: Trainer, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("episodes") is not None:
            kwargs["episodes"] = min(kwargs["episodes"], 2)
        return evaluate(self, *args, **kwargs)

    Trainer.evaluate = short_evaluate  # type: ignore[method-assign]

    config_init = OffPolicyConfig.__init__

    @functools.wraps(config_init)
    def off_policy_init(self: OffPolicyConfig, *args: Any, **kwargs: Any) -> None:
        config_init(self, *args, **kwargs)
        self.warmup_steps = min(self.warmup_steps, CAP // 3)

    OffPolicyConfig.__init__ = off_policy_init  # type: ignore[method-assign]


if CAP > 0:
    _shorten()
