"""What the error of a refused config says beyond OmegaConf's words: the key a section's value
likely meant, a list setting's brackets, the types a setting takes in words, and the closest
valid key to an unknown one."""

from __future__ import annotations

import dataclasses
import difflib
import re
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException

from rltrain.config.files import ConfigError

#: The key a section's value alone most likely meant (``env=CartPole-v1``: ``env.id``).
SECTION_KEYS = {"env": "id", "agent": "name", "strategy": "name", "trainer": "num_steps"}


def check_sections(raw: DictConfig) -> None:
    """Refuse a section given a value instead of keys, naming the key it likely meant."""
    for section, key in SECTION_KEYS.items():
        node = raw.get(section) if not OmegaConf.is_missing(raw, section) else None
        if node is not None and not isinstance(node, DictConfig):
            raise ConfigError(f"{section} is a section of settings, not a value; got "
                              f"{section}={node!r}. Write {section}.{key}={node} (each setting "
                              f"is {section}.KEY=VALUE; rltrain fit --print-config shows them).")


def list_hint(error: OmegaConfBaseException) -> str:
    """For a list setting given a plain value (``agent.hidden_sizes=64,64``), the message that
    gives its YAML list; "" for another error."""
    key, value = getattr(error, "full_key", None), getattr(error, "value", None)
    if "ListConfig, list or tuple" not in str(error) or key is None:
        return ""
    return (f"{key} is a list; got {value!r}. Write it in brackets: {key}=[{value}] (on a "
            "shell, quote it if it has spaces).")


#: Type hints as an error says them.
TYPE_WORDS = {"bool": "true, false", "str": "a string", "int": "an integer",
               "float": "a number", "NoneType": "null", "Path": "a path"}


def type_hint(error: OmegaConfBaseException) -> str:
    """For a value of the wrong type (``trainer.compile=2``), the message that says the types
    the setting takes in words; "" for another error."""
    found = re.search(r"Value '(.*)' of type '(.*)' is incompatible with type hint '(.*)'",
                      str(error))
    key = getattr(error, "full_key", None)
    if found is None or key is None:
        return ""
    value, kind, hint = found.groups()
    names = re.findall(r"\w+", hint.removeprefix("Optional[").removeprefix("Union["))
    words = [word for name in names if name not in ("Union", "Optional")
             for word in TYPE_WORDS.get(name, name).split(", ")]
    if hint.startswith("Optional["):
        words.append("null")
    said = words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"
    return f"{key} must be {said}; got {value} ({kind}). Its values are in docs/configs.md."


def _unset_section_keys(base: DictConfig, path: str) -> list[str]:
    """The fields of the dataclass an unset (None) section at ``path`` takes, e.g.
    ``env.atari``'s; none when ``path`` is no such section."""
    node: Any = base
    for part in path.split("."):
        node = node._get_node(part) if isinstance(node, DictConfig) else None
    kind = getattr(getattr(node, "_metadata", None), "ref_type", None)
    return ([field.name for field in dataclasses.fields(kind)]
            if isinstance(kind, type) and dataclasses.is_dataclass(kind) else [])


def unknown_key_message(base: DictConfig, error: ConfigKeyError) -> str:
    full_key = str(error.full_key or error.key)
    parent, _, key = full_key.rpartition(".")
    node = OmegaConf.select(base, parent) if parent else base
    valid = [str(k) for k in node.keys()] if isinstance(node, DictConfig) else \
        _unset_section_keys(base, parent)
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.5)
    hint = f" Did you mean {(parent + '.' if parent else '') + close[0]!r}?" if close else ""
    where = f"under {parent!r}" if parent else "at the top level"
    return f"Unknown config key {full_key!r}.{hint} Valid keys {where}: {', '.join(valid)}."
