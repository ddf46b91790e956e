"""How a replay samples, as settings: uniform or prioritized draws, n-step windows. The buffers
(:mod:`rltrain.buffers.sampling`) do the sampling; the off-policy loop's settings
(:mod:`rltrain.settings.loops`) and the agents' ``replay_sampling`` hook name it."""

from __future__ import annotations

from dataclasses import dataclass

from rltrain.settings.base import Settings, setting


@dataclass
class PriorityConfig(Settings):
    """Settings of proportional prioritized replay (Schaul et al. 2016, arXiv:1511.05952).

    Attributes:
        alpha: Priority exponent: a transition is drawn with probability ``p_i**alpha /
            sum_k p_k**alpha``; 0 is uniform. Default 0.6 (the paper's proportional variant).
        beta_start: Importance-sampling exponent at the start of the run, annealed linearly to
            1 over ``trainer.num_steps``. Default 0.4.
        epsilon: Added to ``|TD error|`` so that no transition's priority is 0. Default 1e-6.
    """

    alpha: float = setting(0.6, ge=0, le=1)
    beta_start: float = setting(0.4, ge=0, le=1)
    epsilon: float = setting(1e-6, gt=0)


@dataclass(frozen=True)
class ReplaySampling:
    """How a replay samples, as the off-policy strategy asks (``strategy.n_step``,
    ``strategy.prioritized``).

    Attributes:
        n_step: Transitions per n-step window; 1 is 1-step TD. Default 1.
        priority: Prioritized replay's settings; None samples uniformly. Default None.
    """

    n_step: int = 1
    priority: PriorityConfig | None = None

    @property
    def plain(self) -> bool:
        """Uniform 1-step sampling: what every replay does."""
        return self.n_step == 1 and self.priority is None
