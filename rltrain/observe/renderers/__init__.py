"""Renderers: subscribers that show or store what training does."""

from rltrain.observe.renderers.console import ConsoleRenderer
from rltrain.observe.renderers.jsonl import JsonlRenderer
from rltrain.observe.renderers.logger import LoggerRenderer, MetricsLogger
from rltrain.observe.renderers.progress_bar import TqdmRenderer
from rltrain.observe.renderers.tensorboard import TensorBoardRenderer

__all__ = [
    "ConsoleRenderer",
    "JsonlRenderer",
    "LoggerRenderer",
    "MetricsLogger",
    "TensorBoardRenderer",
    "TqdmRenderer",
]
