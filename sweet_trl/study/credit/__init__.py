"""Does the asymmetric critic earn its training? Per-turn credit checked against Monte Carlo returns.

    sweet-rl credit --config study_cpu --run_dir runs/study_cpu $(python -m sweet_trl.precision)

Files: :mod:`~sweet_trl.study.credit.replay` (episodes that start from a recorded turn state),
:mod:`~sweet_trl.study.credit.mc_values` (the ground truth: each candidate's value at held-out states),
:mod:`~sweet_trl.study.credit.value_function` (the value-function baseline), :mod:`~sweet_trl.study.credit.scoring`
(every ranker's scores, cached), :mod:`~sweet_trl.study.credit.metrics` (Spearman, top-1, the pick's value, with
intervals over tasks), :mod:`~sweet_trl.study.credit.arguments` (its options),
:mod:`~sweet_trl.study.credit.command` (the command: the stages it prepares, the ground truth, the scores),
:mod:`~sweet_trl.study.credit.results` (the JSON and its tables), :mod:`~sweet_trl.study.credit.report`
(``sweet-rl credit-report``), :mod:`~sweet_trl.study.credit.pair_signal` (where critic pairs differ before the answer).
"""

from sweet_trl.study.credit.metrics import spearman, state_metrics
from sweet_trl.study.credit.replay import ReplayScript, ReplayTurnState

__all__ = ["ReplayScript", "ReplayTurnState", "spearman", "state_metrics"]
