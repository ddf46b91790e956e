"""Inference: a trained policy from a checkpoint (:func:`load_policy`), its actions for NumPy
observations (:meth:`InferencePolicy.predict`), and an export of it to a file that runs with
torch alone (:meth:`InferencePolicy.export`, :func:`export_policy`). See docs/inference.md."""

from rltrain.inference.export import EXPORT_METADATA, export_program
from rltrain.inference.policy import InferencePolicy, export_policy, load_policy

__all__ = ["EXPORT_METADATA", "InferencePolicy", "export_policy", "export_program",
           "load_policy"]
