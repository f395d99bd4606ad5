"""Simulated humans: one protocol (``reply(SimulatorRequest) -> SimulatorReply``), several players.

* :class:`~colbench_gym.simulators.offline_backend.OfflineBackendSimulator`: answers from the hidden
  reference function without a model (the backend default).
* :class:`~colbench_gym.simulators.offline_frontend.OfflineFrontendSimulator`: compares the two renders
  and DOMs without a model (the frontend default).
* :class:`~colbench_gym.simulators.openai_compat.OpenAISimulator`: any OpenAI-compatible chat endpoint.
* :class:`ScriptedSimulator`: fixed replies, for tests.
"""

from colbench_gym.simulators.base import DONT_KNOW, ScriptedSimulator, Simulator, SimulatorReply, SimulatorRequest
from colbench_gym.simulators.offline_backend import OfflineBackendSimulator
from colbench_gym.simulators.offline_frontend import OfflineFrontendSimulator
from colbench_gym.simulators.openai_compat import OpenAISimulator

__all__ = [
    "DONT_KNOW", "OfflineBackendSimulator", "OfflineFrontendSimulator", "OpenAISimulator", "ScriptedSimulator",
    "Simulator", "SimulatorReply", "SimulatorRequest",
]
