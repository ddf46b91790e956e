"""Config files: the YAML a user writes (:func:`load_yaml`, key=value overrides), the configs
rltrain ships (:data:`SHIPPED_CONFIGS`), and the configs a run stores, read as untrusted input
(:func:`load_stored`: size and alias limits, every ``${`` taken literally)."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf, grammar_parser
from omegaconf.errors import GrammarParseError, OmegaConfBaseException
from omegaconf.grammar.gen.OmegaConfGrammarParser import OmegaConfGrammarParser as Parser

import rltrain.agents
import rltrain.strategies  # noqa: F401  (and the shipped strategies)
from rltrain.checkpoint import atomic_write_text
from rltrain.config.trainer_config import TrainerConfig as TrainerConfig
from rltrain.envs.atari import is_atari_id
from rltrain.settings.registry import (
    AGENTS,
)

#: Where the shipped YAML configs live (``configs/`` in the repository links here).
SHIPPED_CONFIGS = Path(__file__).parent / "shipped"


class ConfigError(ValueError):
    """A config key or value is wrong; the message names the key and what would be right."""


def omegaconf_message(error: OmegaConfBaseException) -> str:
    message = str(error.msg if getattr(error, "msg", None) else error).splitlines()[0]
    key = getattr(error, "full_key", None)
    hint = (" Interpolations are written ${section.key} or ${oc.env:NAME}; write \\${ for a "
            "literal ${." if "${" in message or "interpolation" in message.lower()
            or "viable alternative" in message else "")
    return f"{key or 'config'}: {message}.{hint}"


def parse_overrides(overrides: Iterable[str]) -> DictConfig:
    """``["agent.lr=1e-3", "trainer.num_steps=20000"]`` as a config (values parsed as YAML)."""
    items = list(overrides)
    for item in items:
        key, sep, _ = item.partition("=")
        if not sep or not key or key.startswith(("+", "~", "-")):
            raise ConfigError(
                f"Cannot read the override {item!r}: write key=value with a dotted key, e.g. "
                "agent.lr=1e-3 or trainer.num_steps=20000.")
    try:
        return OmegaConf.from_dotlist(items)
    except OmegaConfBaseException as error:
        raise ConfigError(f"Cannot read the overrides {items}: {omegaconf_message(error)}"
                          ) from None


def load_yaml(path: str | Path) -> DictConfig:
    """A YAML config file as an (unvalidated) config; a bare name finds a shipped config."""
    path = Path(path)
    bare = not path.exists() and path.parent == Path(".") and not path.suffix
    if bare:
        path = SHIPPED_CONFIGS / f"{path}.yaml"
    if not path.is_file():
        shipped = ", ".join(shipped_configs())
        hint = (" An override needs a value: key=value, e.g. agent.lr=1e-3."
                if path.suffix not in (".yaml", ".yml") else "")
        named = str(path.stem).lower()
        close = difflib.get_close_matches(named, shipped_configs(), n=1, cutoff=0.75)
        if close and bare:
            hint = f" Did you mean {close[0]!r}?"
        if named in AGENTS:
            hint = (f" To train {AGENTS[named].cls.__name__}, write agent.name={named} (it "
                    "starts from that agent's preset for the env).")
        what = (f"No config {path.stem!r}: no such file here, and no shipped config of that "
                "name." if bare else f"No config file at {path}.")
        raise FileNotFoundError(f"{what}{hint} Shipped configs: {shipped}.")
    try:
        loaded = OmegaConf.load(path)
    except yaml.YAMLError as error:
        where = getattr(error, "problem_mark", None)
        line = f" (line {where.line + 1}, column {where.column + 1})" if where else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        if "python/" in str(error):
            problem = ("it uses a Python object tag (!!python/...); configs hold plain values "
                       "only, and no tag is ever turned into an object")
        raise ConfigError(f"{path} is not a valid YAML config{line}: {problem}.") from None
    except OmegaConfBaseException as error:
        raise ConfigError(f"{path}: {omegaconf_message(error)}") from None
    except UnicodeDecodeError as error:
        raise ConfigError(f"{path} is not a text file ({error}).") from None
    if not isinstance(loaded, DictConfig):
        raise ConfigError(f"{path} holds a YAML {'list' if loaded is not None else 'nothing'};"
                          " a config is a mapping of sections.")
    return loaded


def load_stored(path: str | Path) -> DictConfig:
    """A config a run stored (``RUN_DIR/config.yaml``), its ``${...}`` taken literally: a file
    on disk never resolves interpolations (``${oc.env:...}`` would copy environment variables
    into the run's paths and logs); only the user's own files and overrides do."""
    return literal_config(read_stored(path))


#: The largest stored config read (rltrain writes a few KB).
MAX_STORED_CONFIG_BYTES = 1 << 20


def read_stored(path: str | Path) -> dict[str, Any]:
    """A stored config as plain data, nothing resolved; refused when larger than
    :data:`MAX_STORED_CONFIG_BYTES` or holding YAML aliases (which rltrain never writes, and
    which can expand a small file into more data than memory holds)."""
    path = Path(path)
    size = path.stat().st_size if path.is_file() else 0
    if size > MAX_STORED_CONFIG_BYTES:
        raise ConfigError(f"{path} is {size:,} bytes; a stored config is at most "
                          f"{MAX_STORED_CONFIG_BYTES:,} (rltrain writes a few KB). It was not "
                          "written by rltrain, or it was altered.")
    if path.is_file() and _has_alias(path):
        raise ConfigError(f"{path} uses YAML aliases (*name), which rltrain never writes; it "
                          "was altered or not written by rltrain.")
    return to_container_raw(load_yaml(path))


def _has_alias(path: Path) -> bool:
    try:
        tokens = yaml.scan(path.read_text(encoding="utf-8"), Loader=yaml.SafeLoader)
        return any(isinstance(token, yaml.AliasToken) for token in tokens)
    except (yaml.YAMLError, UnicodeDecodeError):
        return False  # load_yaml says what is wrong


def literal_config(data: Mapping[str, Any]) -> DictConfig:
    """A config from stored plain data (a checkpoint's ``"config"``), ``${`` escaped."""
    config = OmegaConf.create(_escape(dict(data)))
    assert isinstance(config, DictConfig)
    return config


def to_container_raw(config: DictConfig) -> dict[str, Any]:
    """``config`` as plain data, interpolations unresolved."""
    container = OmegaConf.to_container(config, resolve=False)
    assert isinstance(container, dict)
    return {str(k): v for k, v in container.items()}


def _escape(value: Any) -> Any:
    if isinstance(value, str):
        return _literal_string(value)
    if isinstance(value, Mapping):
        return {str(k): _escape(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_escape(v) for v in value]
    return value


#: ``${`` and the backslashes before it: OmegaConf reads ``\\`` before ``${`` as one
#: backslash and ``\${`` as a literal ``${``.
_INTERPOLATION_START = re.compile(r"(\\*)\$\{")


def _literal_string(value: str) -> str:
    r"""``value`` written so that OmegaConf reads it back as exactly ``value``: each ``${``
    escaped, and each backslash before one doubled (a plain ``\${`` escape would turn a stored
    ``\${...}`` into a live interpolation). Checked with OmegaConf's own grammar: a string
    that would still hold an interpolation is refused, never resolved."""
    if "${" not in value:
        return value
    escaped = _INTERPOLATION_START.sub(lambda m: m.group(1) * 2 + "\\${", value)
    if _holds_interpolation(escaped):
        raise ConfigError(f"A stored config holds the string {value[:80]!r}, which cannot be "
                          "taken literally; it was altered or not written by rltrain.")
    return escaped


def _holds_interpolation(value: str) -> bool:
    """Whether OmegaConf's grammar parses ``value`` with an interpolation in it."""
    try:
        tree = grammar_parser.parse(value, parser_rule="configValue")
    except GrammarParseError:
        return True
    stack: list[Any] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (Parser.InterpolationNodeContext,
                             Parser.InterpolationResolverContext)):
            return True
        stack.extend(getattr(node, "children", None) or ())
    return False


def shipped_configs() -> list[str]:
    """The names of the YAML configs that ship with rltrain (``dqn_cartpole``, ...)."""
    return sorted(p.stem for p in SHIPPED_CONFIGS.glob("*.yaml"))


def preset_fits(preset: str, env_id: str | None) -> bool:
    """Whether the shipped ``preset`` is tuned for ``env_id``: its own ``env.id``, or, for an
    Atari preset (one that sets ``env.atari``: ``ppo_atari``, ``dqn_atari``, ``rainbow``), any
    ALE game."""
    config = load_yaml(preset)
    return (OmegaConf.select(config, "env.id") == env_id
            or (OmegaConf.select(config, "env.atari") is not None and is_atari_id(env_id)))


def save_config(config: DictConfig | Mapping[str, Any], path: str | Path) -> None:
    """Write ``config`` as YAML (atomically: a crash leaves the old file or the new one)."""
    atomic_write_text(Path(path), OmegaConf.to_yaml(config))
