"""The critics' best-of-N judgement pooled over several study runs (for example two seeds), from their stored scores.

One run's judgement (``<run_dir>/critic_eval/``, see :mod:`sweet_trl.study.critic_run`) judges each critic on the
held-out answer turns of its own zero-shot episodes. Runs with other seeds judge other critics on other turns of
the same test tasks, so pooling them asks the question of the paper's ablation with more turns: does the critic
trained with the privileged information pick a best candidate more often than the one trained without it? The
paired difference is averaged per task (turns of one task, from one run or several, are not independent draws) and
the tasks are resampled. Nothing is scored again: the scores are read from each run's ``scores.jsonl``.

    HF_HUB_OFFLINE=1 .venv/bin/python scripts/pool_critic_judgements.py runs/study_cpu_run3_judge \\
        runs/study_cpu_run3_seed1_judge --json benchmarks/results/critic_judgement_pooled.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from sweet_trl.pipeline import write_json_atomic
from sweet_trl.study.critic_eval import best_of_n_selection, read_with_settings, stored_rankers
from sweet_trl.study.critic_run import SCORES_FILE
from sweet_trl.study.results import selection_lines


def pooled_rows(run_dirs: list[Path]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for run_dir in run_dirs:
        scored = read_with_settings(run_dir / "critic_eval" / SCORES_FILE)
        if scored is None:
            raise SystemExit(f"{run_dir / 'critic_eval' / SCORES_FILE} not found: run the study's critic judgement "
                             "(study.critic_eval_states > 0) on this run first")
        rows.extend({**row, "run": str(run_dir)} for row in scored)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dirs", nargs="+", type=Path, help="study run folders whose critics were judged")
    parser.add_argument("--seed", type=int, default=0, help="seed of the bootstrap")
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args(argv)
    rows = pooled_rows(args.run_dirs)
    result = best_of_n_selection(rows, stored_rankers(rows), seed=args.seed)
    result["runs"] = [str(d) for d in args.run_dirs]
    print(f"{len(args.run_dirs)} runs pooled")
    print("\n".join(selection_lines(result)))
    if args.json:
        write_json_atomic(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
