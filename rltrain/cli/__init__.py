"""The ``rltrain`` command (:mod:`.app`) and its ``plot`` subcommand (:mod:`.plot`)."""

from rltrain.cli.app import main

__all__ = ["main"]

