"""Configuration: the schema of a run (:mod:`.schema`), the Trainer's settings
(:mod:`.trainer_config`), the registry of agents and strategies (:mod:`.registry`), building
objects from a config (:mod:`.instantiate`), the trust rules for import paths (:mod:`.targets`)
and the shipped presets (:mod:`.presets`)."""

from rltrain._moved import moved

#: What ``rltrain/config.py`` held before the layered layout, found in its modules now.
__getattr__ = moved("rltrain.config", {
    **dict.fromkeys(["EnvConfig", "RunConfig", "schema", "compose", "presets_for",
                     "retuned_message", "validate", "load_config", "to_container", "lookup",
                     "SECTION_KEYS"], "rltrain.config.schema"),
    **dict.fromkeys(["ConfigError", "parse_overrides", "load_yaml", "load_stored",
                     "read_stored", "literal_config", "to_container_raw", "shipped_configs",
                     "save_config", "SHIPPED_CONFIGS", "MAX_STORED_CONFIG_BYTES"],
                    "rltrain.config.files"),
    **dict.fromkeys(["AGENTS", "STRATEGIES", "Registered", "registered"],
                    "rltrain.config.registry"),
}, warn=False)

