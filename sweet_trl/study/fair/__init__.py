"""The fair study: SWEET-RL, its baselines and its controls at equal compute, settings read on validation, the test
tasks read once per arm (:mod:`~sweet_trl.study.fair.runner`)."""

from sweet_trl.study.fair.runner import FairStudy, run_fair_study

__all__ = ["FairStudy", "run_fair_study"]
