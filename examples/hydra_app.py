"""rltrain inside your own Hydra app: rltrain's structured config is the app's config.

    pip install "rltrain[hydra]"
    python examples/hydra_app.py trainer.num_steps=20000 agent.lr=1e-3
    python examples/hydra_app.py --multirun strategy.seed=0,1,2

Hydra composes the config and type-checks the overrides against rltrain's dataclasses
(``RunConfig``); ``build`` validates it again and makes the trainer, agent and environment.
Each run trains in Hydra's output directory unless ``trainer.run_dir`` is set, so
``config.yaml``, TensorBoard files and checkpoints sit beside Hydra's own ``.hydra/`` files.
"""

from __future__ import annotations

import hydra
from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from rltrain.config.schema import RunConfig
from rltrain.trainer import build

ConfigStore.instance().store(name="rltrain", node=RunConfig)


@hydra.main(version_base=None, config_name="rltrain")
def main(cfg: DictConfig) -> float:
    """Train as ``cfg`` says; returns the best evaluation return (for Hydra sweepers)."""
    if cfg.trainer.run_dir is None:
        cfg.trainer.run_dir = HydraConfig.get().runtime.output_dir
    result = build(cfg).fit()
    best = result.summary.best_eval_return
    print(f"best evaluation return: {best}")
    return float("nan") if best is None else best


if __name__ == "__main__":
    main()
