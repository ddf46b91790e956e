"""``python -m rltrain.cli``: the ``rltrain`` command."""

from rltrain.cli.app import main

raise SystemExit(main())
