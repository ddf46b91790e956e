"""The ``rltrain`` command (:mod:`.app`) and its ``plot`` subcommand (:mod:`.plot`)."""

from rltrain.cli.app import console, main

__all__ = ["console", "main"]

