"""The verifiers plugin id of ColBench (``pip install 'colbench-gym[verifiers]'``).

Run by verifiers' v1 eval command: ``.venv/bin/eval colbench_verifiers ...`` with verifiers 0.3.1, ``vf-eval
colbench_verifiers ...`` with 0.4.

verifiers' v1 loader imports a taskset, its ``Env`` and its default harness by a top-level module name, from this
package's ``__all__``; this package is that name for :mod:`colbench_gym.integrations.verifiers`, where everything is
defined and documented. verifiers 0.3.1's legacy loader (``verifiers.load_environment``, its ``vf-eval``) calls
``load_environment`` here instead, and stops with a message naming the v1 calls (ColBench is a v1 environment only).
"""

from colbench_gym.integrations.verifiers import (
    ColBenchChatHarness,
    ColBenchEnv,
    ColBenchTaskset,
    load_environment,
)

__all__ = ["ColBenchChatHarness", "ColBenchEnv", "ColBenchTaskset", "load_environment"]
