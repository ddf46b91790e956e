"""The run engine: :class:`~rltrain.strategies.run.engine.Run` (assembly and cadence), the
ranks' agreement (:mod:`.agreement`) and failure handling (:mod:`.failure`)."""
