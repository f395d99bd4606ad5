"""``StageError``, raised when a stage cannot run: a module of its own, so that the runner, the stages and the Hub
export raise it without importing one another."""


class StageError(RuntimeError):
    """A stage cannot run (missing input, bad data); the message says what to do."""
