"""Environments: making them (:mod:`.make`), checking them (:mod:`.checks`), saving their
state (:mod:`.pickling`), stepping them for training (:mod:`.runner`) and evaluation
(:mod:`.evaluator`), and recording videos (:mod:`.video`)."""

from rltrain._moved import moved
from rltrain.envs.make import EnvInit, EnvSpec

__all__ = ["EnvInit", "EnvSpec"]

#: What ``rltrain/envs.py`` held before the layered layout, found in its modules now.
__getattr__ = moved("rltrain.envs", {
    **dict.fromkeys(["check_env_id", "env_factory", "step_timeout_error",
                     "make_probe_env", "shape_mismatch", "WorkerVectorEnv", "await_workers",
                     "call_vector_env", "env_name", "file_name", "make_vector_env",
                     "Vectorization", "PR_SET_PDEATHSIG", "CLOSE_TIMEOUT"],
                    "rltrain.envs.make"),
    **dict.fromkeys(["EnvError", "SubEnvError", "EnvStepTimeout"], "rltrain.envs.errors"),
}, warn=False)

