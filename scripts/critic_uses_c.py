"""Does the privileged critic read c? Its best-of-N judgement given each turn's own c against another task's.

The study judges the critic trained with the privileged information c (the task's reference code) against one
trained without it, and at 135M finds them level. This asks why, on the same held-out answer turns and candidates:
the critic scores every candidate again, this time given the reference of another test task of the same template
(the same function with other hidden values: another rate, threshold or text), and picks its best candidate. A
critic that uses c picks worse with the wrong one; a critic that ranks by the dialogue and the answer alone picks
the same. The difference is paired by turn, averaged per task and bootstrapped over tasks, as the study's own.
Procedural tasks only (the template is read from the task id); the other reference comes from the judged turns'
tasks or the rest of ``procedural:test``, so a judgement of a few turns is probed whole.

    HF_HUB_OFFLINE=1 .venv/bin/python scripts/critic_uses_c.py runs/study_cpu_run3_judge --json out.json

It needs the run's judgement (``critic_eval/graded.jsonl`` and ``scores.jsonl``: the study with
``study.critic_eval_states`` > 0) and scores with the run's own critic (``train_critic/model``) and ranking.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from colbench_gym.tasks.procedural import load_procedural
from sweet_trl.pipeline import write_json_atomic
from sweet_trl.study.critic_eval import (
    best_of_n_selection,
    critic_ranker,
    read_with_settings,
    settings_of,
    stored_rankers,
)
from sweet_trl.study.critic_run import SCORES_FILE
from sweet_trl.study.results import selection_lines

TRUE_C, OTHER_C = "critic_privileged", "critic_privileged_other_c"


def template_of(task_id: str) -> str | None:
    """``age_group`` for ``proc-test-seen-age_group-62eb49ba``; None for a task that is not procedural."""
    parts = task_id.split("-")
    return parts[3] if len(parts) == 5 and parts[0] == "proc" else None


def other_references(rows: list[dict[str, Any]], pool: Mapping[str, str] | None = None) -> list[str | None]:
    """For each row, the reference of the next test task of its template (in task id order) that has another
    reference, among the judged turns' tasks and ``pool`` (task id -> reference: the split's other tasks, which a
    judgement of a few turns needs); None when there is none."""
    references: dict[str, dict[str, str]] = {}
    named = [*(pool or {}).items(), *((str(row["task_id"]), str(row["privileged"])) for row in rows)]
    for task_id, reference in named:
        template = template_of(task_id)
        if template is not None:
            references.setdefault(template, {})[task_id] = reference
    out: list[str | None] = []
    for row in rows:
        template = template_of(str(row["task_id"]))
        tasks = sorted(references.get(template, {})) if template else []
        others = [t for t in tasks[tasks.index(row["task_id"]) + 1:] + tasks
                  if references[template][t] != row["privileged"]] if tasks else []
        out.append(references[template][others[0]] if others else None)
    return out


def same_pick(rows: list[dict[str, Any]]) -> float:
    """The share of turns whose top-scored candidate is the same with the turn's own c and with the other."""
    def top(scores: list[float]) -> int:
        return max(range(len(scores)), key=lambda i: (scores[i] if math.isfinite(scores[i]) else -math.inf, -i))

    return sum(top(row["scores"][TRUE_C]) == top(row["scores"][OTHER_C]) for row in rows) / len(rows)


def judged_rows(run_dir: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The judgement's graded turns that the privileged critic scored, with its stored scores, and its settings."""
    folder = run_dir / "critic_eval"
    scored = read_with_settings(folder / SCORES_FILE)
    if scored is None:
        raise SystemExit(f"{folder / SCORES_FILE} not found: run the study's critic judgement on this run first")
    graded = {row["state_id"]: row for row in read_with_settings(folder / "graded.jsonl") or []}
    rows = [{**graded[s["state_id"]], "scores": s["scores"]} for s in scored if TRUE_C in s["scores"]]
    return rows, settings_of(folder / SCORES_FILE)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path, help="a study run folder whose critics were judged")
    parser.add_argument("--batch_size", type=int, default=8, help="candidates scored per forward pass")
    parser.add_argument("--seed", type=int, default=0, help="seed of the bootstrap")
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args(argv)

    rows, settings = judged_rows(args.run_dir)
    pool = {task["task_id"]: task["ground_truth"] for task in load_procedural("test")}
    others = other_references(rows, pool)
    rows = [{**row, "other_c": other} for row, other in zip(rows, others) if other is not None]
    if not rows:
        raise SystemExit("no judged turn has another test task of its template: nothing to compare")

    from sweet_trl.critic import SweetCritic

    critic = SweetCritic.from_pretrained(args.run_dir / "train_critic" / "model", batch_size=args.batch_size)
    rank = critic_ranker(critic, settings["ranking"])
    for row in rows:
        row["scores"] = {TRUE_C: row["scores"][TRUE_C], OTHER_C: rank({**row, "privileged": row["other_c"]})}
    result = best_of_n_selection(rows, stored_rankers(rows), seed=args.seed, pairs=[(TRUE_C, OTHER_C)])
    result["run"] = str(args.run_dir)
    result["ranking"] = settings["ranking"]
    result["same_pick"] = same_pick(rows)
    result["per_turn"] = [{key: row[key] for key in ("state_id", "task_id", "candidate_rewards", "scores")}
                          for row in rows]
    print("\n".join(selection_lines(result)))
    print(f"  the same first choice with either c on {100 * result['same_pick']:.1f}% of {len(rows)} turns")
    if args.json:
        write_json_atomic(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
