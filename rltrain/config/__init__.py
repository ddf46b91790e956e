"""Run configs: the schema of a run (:mod:`.schema`), the Trainer's settings
(:mod:`.trainer_config`), config files (:mod:`.files`; the shipped ones in ``shipped/``),
building objects from a config (:mod:`.instantiate`), the preset a command starts from
(:mod:`.presets`) and RL-Zoo's tuned hyperparameters (:mod:`.zoo`)."""
