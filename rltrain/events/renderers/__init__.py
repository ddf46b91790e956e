"""Renderers: subscribers that show or store what training does."""

from rltrain.events.renderers.console import ConsoleRenderer
from rltrain.events.renderers.jsonl import JsonlRenderer
from rltrain.events.renderers.logger import LoggerRenderer, MetricsLogger
from rltrain.events.renderers.progress_bar import TqdmRenderer
from rltrain.events.renderers.tensorboard import TensorBoardRenderer

__all__ = [
    "ConsoleRenderer",
    "JsonlRenderer",
    "LoggerRenderer",
    "MetricsLogger",
    "TensorBoardRenderer",
    "TqdmRenderer",
]
