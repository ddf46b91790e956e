"""PPO's hyperparameters (:class:`PPOConfig`), apart from the algorithm
(:mod:`rltrain.agents.ppo`) so that both stay readable."""

from __future__ import annotations

import math
from dataclasses import dataclass

from typing_extensions import override

from rltrain.agents.nn.actor_critic import ACTIVATIONS
from rltrain.agents.nn.distributions import LOG_STD_LIMIT
from rltrain.agents.nn.observation_spaces import encoder_setting
from rltrain.agents.nn.recurrent import RECURRENT
from rltrain.settings.base import Settings, discount_factor, learning_rate, setting, widths


@dataclass
class PPOConfig(Settings):
    """PPO's hyperparameters (defaults: Stable-Baselines3's). The rollout length, minibatch
    size and epochs are the strategy's (:class:`~rltrain.OnPolicyConfig`).

    Attributes:
        lr: Adam learning rate. Default 3e-4.
        anneal_lr: Decay the learning rate linearly to 0 over the run's ``num_steps`` (set at
            each rollout from the env steps before it, as CleanRL does; RL-Zoo's ``lin_``
            schedules use the env steps after it, one rollout lower). Default False (SB3's
            constant rate). The schedule follows the
            ``num_steps`` of the current ``fit``: a resume that changes it changes the rate
            from there on.
        adam_eps: Adam's epsilon. Default 1e-5.
        gamma: Discount factor. Default 0.99.
        gae_lambda: GAE's λ (0: one-step TD advantages; 1: Monte-Carlo). Default 0.95.
        clip_range: ε of the clipped surrogate. Default 0.2.
        anneal_clip_range: Decay ``clip_range`` linearly like the learning rate. Default False.
        clip_range_vf: Clip the value update to ``±clip_range_vf`` around the collected value
            (the larger of the clipped and unclipped squared errors is used); None does not
            clip (SB3's default; CleanRL clips with ``clip_range``). Default None.
        ent_coef: Entropy bonus coefficient ``c_e``. Default 0.0.
        vf_coef: Value loss coefficient ``c_v``, on the squared error itself (SB3's; CleanRL
            and OpenAI Baselines halve the error, so their ``vf_coef`` c is c / 2 here).
            Default 0.5.
        max_grad_norm: Clip the gradients' global 2-norm to this. Default 0.5.
        normalize_advantage: Normalise advantages per minibatch. Default True.
        target_kl: End an update early once a minibatch's approximate KL divergence (the k3
            estimator) exceeds ``1.5 * target_kl`` (SB3's threshold; SB3 checks before that
            minibatch's step, rltrain after it); None never does. Default None.
        hidden_sizes: Hidden widths of the policy and value networks. Default [64, 64].
        activation: ``"tanh"`` (default) or ``"relu"``.
        shared_trunk: One trunk for the policy and value heads (else two networks). Default
            False.
        log_std_init: Initial log-std of the Gaussian for ``Box`` actions. Default 0.0.
        use_sde: Explore with generalized state-dependent noise (gSDE,
            :mod:`rltrain.agents.nn.sde`; SB3's ``use_sde``) instead of the state-independent
            log-std; 1-D ``Box`` actions only. ``log_std_init`` starts its ``log σ``. Default False.
        sde_sample_freq: Env steps between draws of gSDE's exploration matrices; -1 draws only
            at each rollout's start (SB3's default). Default -1.
        sde_full_std: gSDE learns one ``σ`` per feature and action; False: one per feature,
            shared by the actions (SB3's ``full_std``). Default True.
        sde_expln: gSDE's ``σ`` grows linearly above ``log σ = 0`` instead of exponentially
            (SB3's ``use_expln``, which RL-Zoo's gSDE entries set). Default False.
        sde_learn_features: The loss's gradient reaches the policy's features through gSDE's
            noise and variance (SB3's ``learn_features``: its SAC does, its PPO detaches
            them). Default False.
        ortho_init: Initialise the networks orthogonally (gains √2, 0.01 and 1, above); False
            keeps PyTorch's default initialisation (SB3's ``ortho_init=False``, RL-Zoo's MuJoCo
            presets). Default True.
        normalize_observations: Normalise observations by running mean and variance (updated
            from each rollout, saved with the model, frozen in evaluation); vector observations
            only (the image encoder scales pixels itself). Default False.
        normalize_rewards: Divide rewards by the running spread of the discounted return
            (as SB3's ``VecNormalize(norm_reward=True)``). Default False.
        clip_observations: Clip normalised observations to ``±`` this. Default 10.
        clip_rewards: Clip scaled rewards to ``±`` this. Default 10.
        normalize_images: Scale image pixels to [0, 1] in the CNN encoder (``uint8`` by 255;
            SB3's ``normalize_images``); False feeds them as they are. Default True.
        encoder: ``"auto"`` (a CNN for images, as SB3 decides them), ``"mlp"`` or ``"cnn"``
            (for every 3-D ``Box``). Default ``"auto"`` (docs/encoders.md).
        recurrent: ``"lstm"`` or ``"gru"``: a recurrent layer between the encoder and the
            trunks, its state carried per sub-env and reset at episode starts; rollouts are
            trained as whole sequences per sub-env (``docs/recurrent.md``). Default None.
        recurrent_hidden_size: Units of the recurrent layer. Default 128 (CleanRL's).
    """

    lr: float = learning_rate(3e-4)
    anneal_lr: bool = False
    adam_eps: float = setting(1e-5, gt=0)
    gamma: float = discount_factor()
    gae_lambda: float = discount_factor(0.95)
    clip_range: float = setting(0.2, gt=0)
    anneal_clip_range: bool = False
    clip_range_vf: float | None = setting(None, gt=0, none="for no value clipping")
    ent_coef: float = setting(0.0, ge=0)
    vf_coef: float = setting(0.5, ge=0)
    max_grad_norm: float = setting(0.5, gt=0)
    normalize_advantage: bool = True
    target_kl: float | None = setting(None, gt=0, none="to never end an update early")
    hidden_sizes: list[int] = widths(64, 64)
    activation: str = setting("tanh", choices=tuple(sorted(ACTIVATIONS)),
                              says=f"one of {sorted(ACTIVATIONS)}")
    shared_trunk: bool = False
    log_std_init: float = setting(0.0, ge=-LOG_STD_LIMIT, le=LOG_STD_LIMIT, why=(
        f"a standard deviation of exp(log_std_init), from {math.exp(-LOG_STD_LIMIT):.1e} to "
        f"{math.exp(LOG_STD_LIMIT):.1e}"))
    use_sde: bool = False
    sde_sample_freq: int = -1
    sde_full_std: bool = True
    sde_expln: bool = False
    sde_learn_features: bool = False
    ortho_init: bool = True
    normalize_observations: bool = False
    normalize_rewards: bool = False
    clip_observations: float = setting(10.0, gt=0)
    clip_rewards: float = setting(10.0, gt=0)
    normalize_images: bool = True
    encoder: str = encoder_setting()
    recurrent: str | None = setting(None, choices=RECURRENT, says=f"one of {list(RECURRENT)} "
                                    "or null")
    recurrent_hidden_size: int = setting(128, ge=1)

    @override
    def rules(self) -> list[tuple[bool, str]]:
        return [
            (self.sde_sample_freq == -1 or self.sde_sample_freq >= 1,
             f"sde_sample_freq must be >= 1 env step, or -1 (draw at each rollout's start "
             f"only); got {self.sde_sample_freq}."),
            (not (self.recurrent and self.use_sde),
             "recurrent and use_sde cannot be combined (gSDE's noise reads the trunk's "
             "features step by step); set agent.use_sde=false."),
        ]
