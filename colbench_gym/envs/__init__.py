"""ColBench environments. Import the classes from here; create them with ``gym.make``."""

from colbench_gym.envs.backend import BackendEnv
from colbench_gym.envs.dialogue import ANSWER_MARKER, ActionTooLongError, DialogueEnv, UnknownTaskError
from colbench_gym.envs.frontend import FrontendEnv

__all__ = ["ANSWER_MARKER", "ActionTooLongError", "BackendEnv", "DialogueEnv", "FrontendEnv", "UnknownTaskError"]
