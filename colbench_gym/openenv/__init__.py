"""ColBench as an OpenEnv server (``pip install 'colbench-gym[openenv]'``).

    python -m colbench_gym.openenv --env ColBench-Backend-v0 --tasks train --port 8000

See :mod:`colbench_gym.openenv.server` for the protocol (action ``{"message": str}``, observation fields, what
stays on the server, the HTTP status of each refusal) and ``python -m colbench_gym.openenv --help`` for the
options and their defaults.
"""

from __future__ import annotations

from typing import Any

__all__ = ["InvalidRequestError", "NoEpisodeError", "PrivilegedRefusedError", "RequestError", "ServerConfig",
           "build_models", "create_colbench_app", "environment_class", "main"]
_SERVER_NAMES = frozenset(__all__) - {"main"}


def __getattr__(name: str) -> Any:
    if name in _SERVER_NAMES:
        from colbench_gym.openenv import server

        return getattr(server, name)
    if name == "main":
        from colbench_gym.openenv.__main__ import main

        return main
    raise AttributeError(f"module 'colbench_gym.openenv' has no attribute {name!r}")
