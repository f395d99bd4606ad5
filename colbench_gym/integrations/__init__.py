"""Adapters that put the ColBench environments inside other people's training code.

* :mod:`colbench_gym.integrations.trl`: TRL's ``GRPOTrainer``, through ``environment_factory`` (the dialogue as
  ``ask_human`` / ``submit_answer`` tools) or ``rollout_func`` (the plain ColBench dialogue, the human's tokens
  masked out of the loss). ``pip install 'colbench-gym[trl]'``.
* :mod:`colbench_gym.integrations.verifiers`: a verifiers (v1 API) taskset, ``Env`` and chat harness, for ``vf-eval``
  and prime-rl under the plugin id ``colbench_verifiers``. ``pip install 'colbench-gym[verifiers]'``.
* :mod:`colbench_gym.openenv`: an OpenEnv server (HTTP and WebSocket) for any OpenEnv client
  (``python -m colbench_gym.openenv``). ``pip install 'colbench-gym[openenv]'``.

The doors share :mod:`colbench_gym.integrations.environments` (environments made per rollout, and the test that
tells an infrastructure failure from the agent's). Nothing here is imported by ``import colbench_gym``; each module
imports its own dependencies.
"""
