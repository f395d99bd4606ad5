"""The verifiers plugin id of ColBench: ``vf-eval colbench_verifiers`` (``pip install 'colbench-gym[verifiers]'``).

verifiers imports a taskset, its ``Env`` and its default harness by a top-level module name; this package is that
name for :mod:`colbench_gym.integrations.verifiers`, where everything is defined and documented.
"""

from colbench_gym.integrations.verifiers import (
    ColBenchChatHarness,
    ColBenchEnv,
    ColBenchTaskset,
    load_environment,
)

__all__ = ["ColBenchChatHarness", "ColBenchEnv", "ColBenchTaskset", "load_environment"]
