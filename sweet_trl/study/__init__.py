"""SWEET-RL against its ablation and baselines, trained from one collection and judged on the same held-out tasks.

    sweet-rl study --config study_cpu      # make study-cpu

Files: :mod:`~sweet_trl.study.config` (the ``study:`` section), :mod:`~sweet_trl.study.runner` (which stages run
where), :mod:`~sweet_trl.study.critic_eval` and :mod:`~sweet_trl.study.critic_run` (the critics judged by best-of-N
selection), :mod:`~sweet_trl.study.stats` (bootstrap intervals), :mod:`~sweet_trl.study.results` (JSON and table),
:mod:`~sweet_trl.study.protocol` (the fair-study protocol: settings chosen on ``procedural:validation``, the test tasks
read once per arm and recorded in ``<run_dir>/protocol/test_reads.json``, arms compared at equal rounds).
"""

from sweet_trl.study.config import METHODS, StudyArguments
from sweet_trl.study.runner import Study, load_results, run_study
from sweet_trl.study.stats import Interval, bootstrap_mean, paired_difference

__all__ = ["METHODS", "Interval", "Study", "StudyArguments", "bootstrap_mean", "load_results", "paired_difference",
           "run_study"]
