"""Configuration: the schema of a run (:mod:`.schema`), the Trainer's settings
(:mod:`.trainer_config`), the registry of agents and strategies (:mod:`.registry`), building
objects from a config (:mod:`.instantiate`), the trust rules for import paths (:mod:`.targets`)
and the shipped presets (:mod:`.presets`)."""
