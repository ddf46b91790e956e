"""Experience storage: replay for off-policy agents."""

from rltrain.buffers.replay import ReplayBatch, ReplayBuffer

__all__ = ["ReplayBatch", "ReplayBuffer"]
