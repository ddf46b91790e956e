"""RL-Zoo's tuned hyperparameters as configs: ``rltrain fit zoo:ALGO/ENV_ID``.

An entry of RL-Zoo's ``hyperparams/ALGO.yml`` (the installed ``rl_zoo3`` package's, else the
copy in ``rltrain/config/shipped/zoo``, MIT licence) is laid over Stable-Baselines3's defaults
for the algorithm (what RL-Zoo leaves unsaid, SB3 decides), then translated key by key into
rltrain's, units included: SB3's ``train_freq`` in vector steps becomes env steps summed over
sub-envs, ``gradient_steps: -1`` as many as the env steps collected, ``target_update_interval``
in env steps becomes gradient steps, ``exploration_fraction`` env steps, ``lin_`` schedules
annealing, ``normalize`` PPO's observation and reward normalisation, ``policy_kwargs`` (read as
data, never evaluated) the networks' settings. A key that has no rltrain equivalent is refused,
naming it. An ALE id takes the entry ``atari``; RL-Zoo's ``<Env>NoVel-vN`` ids are Gymnasium's
``<Env>-vN`` with :class:`~rltrain.envs.partial.MaskVelocity`; an id RL-Zoo tuned another
version of (v5 for its v4) takes that version's entry, with a warning. """

from __future__ import annotations

import ast
import importlib.util
import warnings
from pathlib import Path
from typing import Any

import yaml

from rltrain.config.files import ConfigError

#: The algorithms RL-Zoo names, with rltrain's agent and SB3's defaults for the keys translated.
_OFF_POLICY = {"learning_starts": 100, "batch_size": 256, "buffer_size": 1_000_000,
               "tau": 0.005, "gamma": 0.99, "train_freq": 1, "gradient_steps": 1,
               "learning_rate": 3e-4, "n_envs": 1}
_DQN = {**_OFF_POLICY, "learning_rate": 1e-4, "batch_size": 32, "tau": 1.0, "train_freq": 4,
        "target_update_interval": 10_000, "exploration_fraction": 0.1,
        "exploration_initial_eps": 1.0, "exploration_final_eps": 0.05, "max_grad_norm": 10.0,
        "policy_kwargs": "dict(net_arch=[64, 64])"}
_PPO = {"learning_rate": 3e-4, "n_steps": 2048, "batch_size": 64, "n_epochs": 10,
        "gamma": 0.99, "gae_lambda": 0.95, "clip_range": 0.2, "ent_coef": 0.0, "vf_coef": 0.5,
        "max_grad_norm": 0.5, "n_envs": 1, "policy_kwargs": "dict(net_arch=[64, 64])"}
SB3_DEFAULTS: dict[str, tuple[str, dict[str, Any]]] = {
    "dqn": ("dqn", _DQN),
    "qrdqn": ("qrdqn", {**_DQN, "learning_rate": 5e-5, "exploration_fraction": 0.005,
                        "exploration_final_eps": 0.01, "max_grad_norm": None,
                        "policy_kwargs": "dict(net_arch=[64, 64], n_quantiles=200)"}),
    "ppo": ("ppo", _PPO),
    "ppo_lstm": ("ppo", {**_PPO, "n_steps": 128, "batch_size": 128,
                         "policy_kwargs": "dict(net_arch=[64, 64], lstm_hidden_size=256)"}),
    "sac": ("sac", {**_OFF_POLICY, "ent_coef": "auto", "target_entropy": "auto",
                    "target_update_interval": 1,
                    "policy_kwargs": "dict(net_arch=[256, 256], log_std_init=-3)"}),
    "td3": ("td3", {**_OFF_POLICY, "learning_rate": 1e-3, "policy_delay": 2,
                    "target_policy_noise": 0.2, "target_noise_clip": 0.5, "noise_type": None,
                    "policy_kwargs": "dict(net_arch=[400, 300])"}),
}
#: Keys RL-Zoo writes that change nothing rltrain does (its own bookkeeping).
IGNORED = {"n_timesteps"}


def zoo_file(algo: str) -> Path:
    """RL-Zoo's ``hyperparams/<algo>.yml``: the installed ``rl_zoo3``'s, else rltrain's copy."""
    spec = importlib.util.find_spec("rl_zoo3")
    if spec is not None and spec.origin is not None:
        installed = Path(spec.origin).parent / "hyperparams" / f"{algo}.yml"
        if installed.is_file():
            return installed
    return Path(__file__).resolve().parent / "shipped" / "zoo" / f"{algo}.yml"


def zoo_entry(algo: str, env_id: str) -> dict[str, Any]:
    """The entry for ``env_id`` (``atari`` for an ALE id) of RL-Zoo's ``algo`` file."""
    if algo not in SB3_DEFAULTS:
        raise ConfigError(f"zoo:{algo}/{env_id}: rltrain translates RL-Zoo's "
                          f"{sorted(SB3_DEFAULTS)}; not {algo!r}.")
    entries = yaml.safe_load(zoo_file(algo).read_text(encoding="utf-8"))
    key = "atari" if env_id.startswith("ALE/") or env_id.endswith("NoFrameskip-v4") else env_id
    if key not in entries:  # another version of the env: RL-Zoo tunes v4, Gymnasium has v5
        name = key.rpartition("-v")[0]
        versions = sorted(k for k in entries if k.rpartition("-v")[0] == name)
        if not name or not versions:
            raise ConfigError(f"zoo:{algo}/{env_id}: RL-Zoo has no {algo} entry for {key}; it "
                              f"has {sorted(k for k in entries if k != 'default')}.")
        warnings.warn(f"zoo:{algo}/{env_id}: RL-Zoo tuned {versions[-1]}, not {env_id}; "
                      f"its settings are used for {env_id}.", stacklevel=3)
        key = versions[-1]
    return dict(entries[key])


def translate(algo: str, env_id: str) -> dict[str, Any]:
    """RL-Zoo's ``algo`` entry for ``env_id`` as an rltrain config (a nested dict: ``trainer``,
    ``env``, ``strategy``, ``agent``); ``ConfigError`` naming the first key it cannot
    translate."""
    return translate_entry(algo, env_id, zoo_entry(algo, env_id))


def translate_entry(algo: str, env_id: str, entry: dict[str, Any]) -> dict[str, Any]:
    """:func:`translate` of the RL-Zoo ``entry`` (read from its file, or an empty one: SB3's
    defaults) for ``algo`` (a key of :data:`SB3_DEFAULTS`) and ``env_id``."""
    agent, defaults = SB3_DEFAULTS[algo]
    hp = {**defaults, **entry}
    t = _Translation(algo, env_id, hp)
    t.set("trainer", "num_steps", int(float(hp["n_timesteps"])))
    base, novel, version = env_id.rpartition("NoVel-v")
    if novel:  # RL-Zoo's partially observed envs: the velocities hidden by a wrapper
        t.set("env", "id", f"{base}-v{version}")
        t.set("env", "wrappers", [{"_target_": "rltrain.envs.partial.MaskVelocity"}])
    else:
        t.set("env", "id", env_id)
    t.set("agent", "name", agent)
    t.common()
    if agent == "ppo":
        t.on_policy()
    else:
        t.off_policy()
    t.check_all_used()
    return t.config


class _Translation:
    """One entry's translation: the config built so far and the keys used."""

    def __init__(self, algo: str, env_id: str, hp: dict[str, Any]) -> None:
        self.algo, self.env_id, self.hp = algo, env_id, hp
        self.agent = SB3_DEFAULTS[algo][0]
        self.config: dict[str, dict[str, Any]] = {"trainer": {}, "env": {}, "strategy": {},
                                                  "agent": {}}
        self.used = set(IGNORED)

    def refuse(self, key: str, why: str) -> ConfigError:
        return ConfigError(f"zoo:{self.algo}/{self.env_id}: RL-Zoo's {key}: "
                           f"{self.hp.get(key)!r} has no rltrain equivalent ({why}).")

    def get(self, key: str, default: Any = None) -> Any:
        self.used.add(key)
        return self.hp.get(key, default)

    def set(self, section: str, key: str, value: Any) -> None:
        self.config[section][key] = value

    def schedule(self, key: str) -> tuple[float, bool]:
        """A number, or a ``lin_X`` schedule: ``(X, True)``."""
        value = self.get(key)
        if isinstance(value, str) and value.startswith("lin_"):
            return float(value[4:]), True
        try:
            return float(value), False
        except (TypeError, ValueError):
            raise self.refuse(key, "a number or lin_<number> is expected") from None

    def common(self) -> None:
        """Keys every algorithm shares: the policy, its kwargs, sub-envs, wrappers."""
        policy = str(self.get("policy", "MlpPolicy"))
        if policy not in ("MlpPolicy", "CnnPolicy", "MultiInputPolicy", "MlpLstmPolicy",
                          "CnnLstmPolicy"):
            raise self.refuse("policy", "a policy class rltrain does not build")
        if "Lstm" in policy:
            self.set("agent", "recurrent", "lstm")
        self.set("strategy", "num_envs", int(self.get("n_envs", 1)))
        self.set("agent", "gamma", float(self.get("gamma", 0.99)))
        wrappers = self.get("env_wrapper")
        names = wrappers if isinstance(wrappers, list) else [] if wrappers is None else [wrappers]
        for name in names:
            if str(name).endswith("AtariWrapper"):
                self.set("env", "atari", {"frame_stack": int(self.get("frame_stack", 4))})
            else:
                raise self.refuse("env_wrapper", f"{name} is not one rltrain applies")
        if self.get("frame_stack") is not None and "atari" not in self.config["env"]:
            raise self.refuse("frame_stack", "frame stacks come with the Atari pipeline")
        if self.get("env_kwargs"):
            self.set("env", "kwargs", dict(self.get("env_kwargs")))
        self.policy_kwargs(literal(str(self.get("policy_kwargs", "dict()")), "policy_kwargs",
                                   self))
        self.get("optimize_memory_usage")  # rltrain's frame-stack replay stores frames once

    def policy_kwargs(self, kwargs: dict[str, Any]) -> None:
        arch = kwargs.pop("net_arch", None)
        if isinstance(arch, dict):
            parts = [list(v) for v in arch.values()]
            if any(p != parts[0] for p in parts):
                raise self.refuse("policy_kwargs", f"net_arch {arch}: rltrain's actor and "
                                  "critic trunks have the same widths")
            arch = parts[0]
        if arch is not None:
            self.set("agent", "hidden_sizes", [int(w) for w in arch])
        activation = kwargs.pop("activation_fn", None)
        if activation is not None:
            name = {"nn.ReLU": "relu", "nn.Tanh": "tanh"}.get(activation)
            if name is None or (self.agent != "ppo" and name != "relu"):
                raise self.refuse("policy_kwargs", f"activation_fn={activation}")
            if self.agent == "ppo":
                self.set("agent", "activation", name)
        for key, target in (("ortho_init", "ortho_init"), ("log_std_init", "log_std_init"),
                            ("n_quantiles", "n_quantiles"),
                            ("lstm_hidden_size", "recurrent_hidden_size")):
            if key in kwargs:
                self.set("agent", target, kwargs.pop(key))
        if kwargs.pop("enable_critic_lstm", True) is False:
            raise self.refuse("policy_kwargs", "enable_critic_lstm=False: rltrain's value "
                              "head reads the recurrent layer")
        kwargs.pop("shared_lstm", None)  # one LSTM for both heads: rltrain's layout
        for key, target in (("use_expln", "sde_expln"), ("full_std", "sde_full_std")):
            if key in kwargs:
                self.set("agent", target, bool(kwargs.pop(key)))
        if kwargs:
            raise self.refuse("policy_kwargs", f"{sorted(kwargs)}")

    def on_policy(self) -> None:
        lr, anneal = self.schedule("learning_rate")
        clip, anneal_clip = self.schedule("clip_range")
        self.set("agent", "lr", lr)
        self.set("agent", "anneal_lr", anneal)
        self.set("agent", "clip_range", clip)
        self.set("agent", "anneal_clip_range", anneal_clip)
        for key, target in (("gae_lambda", "gae_lambda"), ("ent_coef", "ent_coef"),
                            ("vf_coef", "vf_coef"), ("max_grad_norm", "max_grad_norm"),
                            ("target_kl", "target_kl"), ("use_sde", "use_sde"),
                            ("sde_sample_freq", "sde_sample_freq"),
                            ("clip_range_vf", "clip_range_vf"),
                            ("normalize_advantage", "normalize_advantage")):
            if key in self.hp:
                self.set("agent", target, self.get(key))
        self.set("strategy", "name", "on_policy")
        self.set("strategy", "n_steps", int(self.get("n_steps")))
        rollout = int(self.get("n_steps")) * self.config["strategy"]["num_envs"]
        # SB3 cuts a minibatch larger than the rollout to the rollout (one per epoch)
        self.set("strategy", "batch_size", min(int(self.get("batch_size")), rollout))
        self.set("strategy", "update_epochs", int(self.get("n_epochs")))
        normalize = self.get("normalize", False)
        if isinstance(normalize, str):
            normalize = literal(normalize, "normalize", self)
        obs, reward = ((normalize.get("norm_obs", True), normalize.get("norm_reward", True))
                       if isinstance(normalize, dict) else (bool(normalize), bool(normalize)))
        self.set("agent", "normalize_observations", bool(obs))
        self.set("agent", "normalize_rewards", bool(reward))
        if self.config["agent"].get("recurrent") and self.config["strategy"]["num_envs"] > 1:
            steps = self.config["strategy"]["n_steps"]
            batch = self.config["strategy"]["batch_size"]
            if batch % steps:  # sb3-contrib cuts sequences; rltrain trains whole ones
                self.set("strategy", "batch_size", steps * max(1, round(batch / steps)))

    def off_policy(self) -> None:
        lr, anneal = self.schedule("learning_rate")
        if anneal:
            raise self.refuse("learning_rate", f"{self.agent} has no learning-rate schedule")
        envs = self.config["strategy"]["num_envs"]
        freq = self.get("train_freq")
        if isinstance(freq, list):
            if len(freq) != 2 or freq[1] != "step":
                raise self.refuse("train_freq", "rltrain trains every N env steps, not episodes")
            freq = freq[0]
        interval = int(freq) * envs
        gradient_steps = int(self.get("gradient_steps"))
        steps = interval if gradient_steps == -1 else gradient_steps
        self.set("agent", "lr", lr)
        self.set("strategy", "name", "off_policy")
        self.set("strategy", "buffer_size", int(float(self.get("buffer_size"))))
        self.set("strategy", "batch_size", int(self.get("batch_size")))
        self.set("strategy", "warmup_steps", int(float(self.get("learning_starts"))))
        self.set("strategy", "train_interval", interval)
        self.set("strategy", "train_steps", steps)
        if self.get("n_steps") not in (None, 1) and "n_steps" in self.hp:
            self.set("strategy", "n_step", int(self.hp["n_steps"]))
        self.set("agent", "tau", float(self.get("tau")))
        grad_per_env_step = steps / interval
        if self.agent in ("dqn", "qrdqn"):
            self.q_learning(grad_per_env_step)
        elif self.agent == "sac":
            self.sac()
        else:
            self.td3()

    def q_learning(self, grad_per_env_step: float) -> None:
        num_steps = self.config["trainer"]["num_steps"]
        target = float(self.get("target_update_interval"))
        interval = self.config["strategy"]["train_interval"]
        # SB3 counts env steps and copies during collection: at most once per training round
        self.set("agent", "target_update_interval",
                 max(1, round(max(target, interval) * grad_per_env_step)))
        self.set("agent", "exploration_steps",
                 round(float(self.get("exploration_fraction")) * num_steps))
        self.set("agent", "epsilon_start", float(self.get("exploration_initial_eps")))
        self.set("agent", "epsilon_end", float(self.get("exploration_final_eps")))
        self.set("agent", "double_q", False)  # SB3's DQN and sb3-contrib's QR-DQN have none
        clip = self.get("max_grad_norm")
        self.set("trainer", "gradient_clip_val", None if clip is None else float(clip))
        if self.agent == "qrdqn":  # sb3-contrib's Adam epsilon
            self.set("agent", "adam_eps", 0.01 / self.config["strategy"]["batch_size"])

    def sac(self) -> None:
        coef = self.get("ent_coef")
        if isinstance(coef, str) and coef.startswith("auto"):
            self.set("agent", "alpha", None)
            if "_" in coef:
                self.set("agent", "alpha_init", float(coef.split("_", 1)[1]))
        else:
            self.set("agent", "alpha", float(coef))
        entropy = self.get("target_entropy")
        self.set("agent", "target_entropy", None if entropy == "auto" else float(entropy))
        self.set("agent", "target_update_interval", int(self.get("target_update_interval")))
        for key in ("use_sde", "sde_sample_freq"):
            if key in self.hp:
                self.set("agent", key, self.get(key))
        if self.get("use_sde_at_warmup"):
            raise self.refuse("use_sde_at_warmup", "warm-up actions are uniform in rltrain")

    def td3(self) -> None:
        for key in ("policy_delay", "target_policy_noise", "target_noise_clip"):
            self.set("agent", key, self.get(key))
        noise = self.get("noise_type")
        if noise is None:
            self.set("agent", "exploration_noise", 0.0)
        elif noise == "normal":  # SB3 adds it to actions scaled to [-1, 1]: our unit
            self.set("agent", "exploration_noise", float(self.get("noise_std")))
        else:
            raise self.refuse("noise_type", "rltrain's TD3 explores with Gaussian noise")

    def check_all_used(self) -> None:
        left = sorted(set(self.hp) - self.used)
        if left:
            raise self.refuse(left[0], "a setting rltrain does not have")


def literal(text: str, key: str, translation: _Translation) -> Any:
    """A Python literal written in a zoo entry (``dict(net_arch=[64, 64], activation_fn=
    nn.ReLU)``), read as data: numbers, strings, lists, ``dict(...)`` and ``{...}``, and
    ``nn.<Name>`` as the string ``"nn.<Name>"``; anything else is refused, never evaluated."""
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        raise translation.refuse(key, "not a Python literal") from None

    def value(n: ast.AST) -> Any:
        if isinstance(n, ast.Constant):
            return n.value
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
            return -value(n.operand)
        if isinstance(n, ast.List | ast.Tuple):
            return [value(e) for e in n.elts]
        if isinstance(n, ast.Dict):
            return {value(k): value(v) for k, v in zip(n.keys, n.values, strict=True)
                    if k is not None}
        if (isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "dict"
                and not n.args):
            return {k.arg: value(k.value) for k in n.keywords if k.arg is not None}
        if (isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
                and n.value.id == "nn"):
            return f"nn.{n.attr}"
        raise translation.refuse(key, f"{ast.unparse(n)} is not data rltrain reads")

    return value(node)
