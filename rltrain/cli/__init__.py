"""The ``rltrain`` command (:mod:`.main`) and its ``plot`` subcommand (:mod:`.plot`)."""
