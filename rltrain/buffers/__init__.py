"""Experience storage: replay (off-policy agents; uniform or prioritized, n-step), sequence
replay (Dreamer) and rollouts (on-policy agents)."""

from typing import TYPE_CHECKING, Any, Protocol

from rltrain.buffers.frames import FrameStackReplay
from rltrain.buffers.replay import ReplayBatch, ReplayBuffer
from rltrain.buffers.rollout import RolloutBatch, RolloutBuffer
from rltrain.buffers.sequence import SequenceBatch, SequenceReplayBuffer
from rltrain.settings.replay import PriorityConfig

if TYPE_CHECKING:
    from rltrain.types import Transitions


class Buffer(Protocol):
    """What the off-policy strategy needs of the buffer an agent declares
    (``ReplayAgent.make_buffer``): :class:`ReplayBuffer` and :class:`SequenceReplayBuffer`."""

    def add(self, transitions: "Transitions") -> None:
        """Store one vector step."""

    def can_sample(self) -> bool:
        """True once :meth:`sample` can return a batch."""

    def sample(self, batch_size: int) -> Any:
        """A batch for the agent's ``training_step``."""

    def __len__(self) -> int:
        """What it holds (transitions or rows)."""

    @property
    def nbytes(self) -> int:
        """Bytes of storage."""

    def prefetch(self, batches: int, batch_size: int) -> None:
        """Draw the next ``batches`` batches of ``batch_size`` at once, for the next calls of
        :meth:`sample` (a :class:`ReplayBuffer`); a buffer that draws per batch does nothing."""

    @property
    def sampler_state(self) -> Any:
        """What its sampling has drawn so far (generator state, prefetched batches used): what
        a failed gradient step puts back, by assigning it."""

    @sampler_state.setter
    def sampler_state(self, state: Any) -> None: ...

    def state_dict(self) -> dict[str, Any]:
        """Its state, for checkpoints."""

    def load_state_dict(self, state: dict[str, Any], /) -> None:
        """Restore :meth:`state_dict`'s output."""


__all__ = ["Buffer", "FrameStackReplay", "PriorityConfig", "ReplayBatch", "ReplayBuffer",
           "RolloutBatch", "RolloutBuffer", "SequenceBatch", "SequenceReplayBuffer"]
