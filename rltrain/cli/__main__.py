"""``python -m rltrain.cli``: the ``rltrain`` command."""

from rltrain.cli.main import main

raise SystemExit(main())
