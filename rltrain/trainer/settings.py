"""A Trainer's settings: :class:`~rltrain.config.trainer_config.TrainerConfig`'s fields (declared
there, once) and the objects a config file cannot hold, all checked before any run directory
exists."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Union

import torch
from omegaconf import DictConfig

from rltrain.checkpoint.io import CheckpointIO
from rltrain.config.trainer_config import TrainerConfig
from rltrain.observe.loggers import is_unrecorded, logger_items
from rltrain.observe.processor import Subscriber
from rltrain.observe.renderers import MetricsLogger
from rltrain.observe.renderers.tensorboard import is_summary_writer
from rltrain.optim import check_autocast
from rltrain.runtime.interrupt import Interrupter
from rltrain.strategies.base import RLStrategy

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter

#: What ``Trainer(logger=...)`` accepts, as Lightning's does: a list of loggers (all written
#: at once), one logger, or True (``["tensorboard"]``) / False (none). A logger is a name
#: (``"tensorboard"``, ``"csv"``, ...), your ``SummaryWriter`` or a Lightning-style object.
Logger = Union[bool, str, "SummaryWriter", MetricsLogger,
               Sequence[Union[str, "SummaryWriter", MetricsLogger]]]


@dataclass(kw_only=True, eq=False, repr=False)
class TrainerSettings(TrainerConfig):
    """The settings of a :class:`~rltrain.Trainer` (its base class): every field of
    :class:`~rltrain.config.trainer_config.TrainerConfig` (see it for each one's meaning, unit and
    default), and these objects. Each is checked when the Trainer is made and kept as the
    attribute of the same name.

    Args:
        strategy: The loop. Default None: the agent's default strategy, built at each ``fit``
            (the registered strategy that takes ``agent.default_strategy_settings()``);
            after a ``fit``, ``strategy`` is the one that ran.
        seed: Seed of the default strategy (to seed your own strategy, set it in its config).
            Default None: 0.
        callbacks: Subscribers that receive every event (after the built-in renderers); each
            can end the run with ``request_stop(reason)``.
        config: The run's configuration (an omegaconf ``DictConfig`` or a mapping): saved as
            ``run_dir/config.yaml``, in every checkpoint and as TensorBoard hyperparameters,
            with the ``trainer``, ``env``, ``strategy`` and ``agent`` sections refreshed from
            what the run really uses. Default None: those four sections only.
        interrupter: The stop request shared with your callbacks and threads. Default: a new
            one, at ``trainer.interrupter``.
        checkpoint_io: Where checkpoints are stored (Lightning's ``CheckpointIO``): a
            :class:`~rltrain.checkpoint.io.CheckpointIO` of your own (an object store, ...).
            Default None: local files in ``checkpoint_dir``.
    """

    strategy: RLStrategy | None = None
    seed: int | None = None
    callbacks: Sequence[Subscriber] = ()
    config: DictConfig | Mapping[str, Any] | None = None
    interrupter: Interrupter = field(default_factory=Interrupter)
    checkpoint_io: CheckpointIO | None = None

    def __post_init__(self) -> None:
        if self.strategy is not None and self.seed is not None:
            raise ValueError(
                "Pass the seed in your strategy's config (e.g. OffPolicyConfig(seed=...)), not "
                "to the Trainer: Trainer(seed=...) only seeds the default strategy.")
        for callback in self.callbacks:
            if not isinstance(callback, Subscriber):
                raise TypeError(f"A callback must be a Subscriber; got {type(callback).__name__}.")
        super().__post_init__()
        self.callbacks = list(self.callbacks)
        #: True when no strategy was given: each ``fit`` builds the agent's default.
        self.default_strategy = self.strategy is None
        for name in ("device", "inference_device"):
            require_device(getattr(self, name), name)
        check_autocast(torch.device(self.device).type, self.torch_dtype)

    def check_logger(self) -> None:
        """Refuse a ``logger`` that is none of :data:`Logger`'s forms (names and the packages
        they need are checked by :func:`~rltrain.observe.loggers.logger_items`)."""
        for item in logger_items(self.logger):
            if not (isinstance(item, (str, MetricsLogger)) or is_unrecorded(item)
                    or is_summary_writer(item)):
                raise TypeError(
                    "logger must be a list of loggers, one logger, True or False; a logger is a "
                    "name, a SummaryWriter or an object with log_metrics(metrics, step); got "
                    f"{type(item).__name__}.")


def require_device(device: str, name: str) -> None:
    """Refuse a CUDA ``device`` where this torch build sees no GPU."""
    if torch.device(device).type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"{name} {device!r}: this torch build sees no CUDA GPU. Train on "
                         "device='cpu', or install a CUDA build of torch.")
