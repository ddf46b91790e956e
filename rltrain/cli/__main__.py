"""``python -m rltrain.cli``: the ``rltrain`` command."""

from rltrain.cli.app import console

console()
