"""Experience storage: uniform replay (off-policy agents) and sequence replay (Dreamer)."""

from rltrain.buffers.replay import ReplayBatch, ReplayBuffer
from rltrain.buffers.sequence import SequenceBatch, SequenceReplayBuffer

__all__ = ["ReplayBatch", "ReplayBuffer", "SequenceBatch", "SequenceReplayBuffer"]
