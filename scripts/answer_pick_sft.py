"""Fine-tune the starting policy on one answer per answer turn: does the critic's pick teach it anything?

A diagnostic of the policy update, apart from DPO; its critic pick became the pipeline's ``train_policy_best`` stage
(:mod:`sweet_trl.best_of_n`), and the random and oracle picks stay here as its control and its ceiling. A run's ``rank`` stage holds N candidate answers at each answer
turn with the critic's scores. This keeps one candidate per turn, chosen by

- ``critic``: the critic's top score (what SWEET-RL's ranking prefers, without DPO's push-down of the rest);
- ``random``: a seeded random candidate (the control: fine-tuning on the policy's own samples sharpens it too);
- ``oracle``: graded by the environment, a candidate that passes every test (the critic's top among those);
  turns where none does are left out (rejection fine-tuning at the answer turn: what a perfect critic could pick),

and fine-tunes the run's starting policy on them with TRL's ``SFTTrainer`` (the loss covers the answer only),
LoRA and the policy trainer's settings of ``study_cpu.yaml`` (lr 1e-4, one epoch, 4 answers per update). Then
evaluate the adapter like any policy and compare it with the start, paired by task:

    HF_HUB_OFFLINE=1 .venv/bin/python scripts/answer_pick_sft.py runs/study_cpu_answer_states --pick critic \\
        --output_dir runs/answer_pick_critic/sft
    HF_HUB_OFFLINE=1 .venv/bin/sweet-rl evaluate --config runs/study_cpu_trained_ws.yaml \\
        --run_dir runs/answer_pick_critic --policy runs/answer_pick_critic/sft/model
    .venv/bin/python scripts/compare_evaluations.py runs/study_cpu/evaluate/zero_shot \\
        runs/answer_pick_critic/evaluate/<its folder>
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pair_accuracy import answer_rows

PICKS = ("critic", "random", "oracle")


def pick_answers(rows: list[dict[str, Any]], pick: str, seed: int = 0) -> list[dict[str, Any]]:
    """One ``{"prompt", "completion", "state_id", "task_id"}`` row per answer turn, the answer chosen by ``pick``.
    ``oracle`` needs ``candidate_rewards`` on the rows (:func:`sweet_trl.study.critic_eval.grade_candidates`)."""
    from sweet_trl.best_of_n import best_candidate
    from sweet_trl.study.critic_eval import SOLVED

    if pick not in PICKS:
        raise ValueError(f"pick must be one of {PICKS}, got {pick!r}")
    rng = random.Random(seed)
    out = []
    for row in rows:
        scores = row["ranking_scores"]
        order = sorted(range(len(scores)), key=lambda i: -scores[i])  # the critic's order, best first
        if pick == "critic":  # what the pipeline's train_policy_best keeps
            index = best_candidate(scores)
        elif pick == "random":
            index = rng.randrange(len(row["candidates"]))
        else:
            rewards = row["candidate_rewards"]
            solved = [i for i in order if math.isfinite(rewards[i]) and rewards[i] >= SOLVED]
            if not solved:
                continue
            index = solved[0]
        prompt = json.loads(row["prompt"]) if isinstance(row["prompt"], str) else row["prompt"]
        out.append({"prompt": prompt, "completion": [{"role": "assistant", "content": row["candidates"][index]}],
                    "state_id": row["state_id"], "task_id": row["task_id"]})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path, help="a run whose rank stage has finished")
    parser.add_argument("--pick", choices=PICKS, required=True)
    parser.add_argument("--output_dir", type=Path, required=True)
    parser.add_argument("--learning_rate", type=float, default=1e-4)
    parser.add_argument("--num_train_epochs", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    import datasets
    from trl import ModelConfig, SFTConfig, SFTTrainer

    from sweet_trl.trainer_utils import fit_and_save, trainer_inputs

    rows, run = answer_rows(args.run_dir)
    if args.pick == "oracle":
        from colbench_gym.tasks.loaders import resolve_tasks
        from sweet_trl.study.critic_eval import grade_candidates

        tasks = {task.task_id: task for task in resolve_tasks(run["train_tasks"])}
        rows = grade_candidates([r for r in rows if r["task_id"] in tasks], tasks)
    examples = pick_answers(rows, args.pick, seed=args.seed)
    if not examples:
        raise SystemExit(f"no answer turn to train on in {args.run_dir} with pick={args.pick}")
    print(f"{len(examples)} answers of {len(rows)} answer turns ({args.pick} pick); base {run['policy_model']}")
    args.output_dir.mkdir(parents=True, exist_ok=True)
    with open(args.output_dir / "answers.jsonl", "w") as f:
        f.writelines(json.dumps(e) + "\n" for e in examples)

    config = SFTConfig(
        output_dir=str(args.output_dir / "model"), learning_rate=args.learning_rate,
        num_train_epochs=args.num_train_epochs, per_device_train_batch_size=2, gradient_accumulation_steps=2,
        max_length=1024, logging_steps=5, save_strategy="no", report_to=[], seed=args.seed, bf16=False,
    )
    model_config = ModelConfig(model_name_or_path=run["policy_model"], use_peft=True, lora_r=16, lora_alpha=32,
                               lora_target_modules="all-linear")
    model, tokenizer, peft_config, _ = trainer_inputs(config, model_config)
    dataset = datasets.Dataset.from_list([{"prompt": e["prompt"], "completion": e["completion"]} for e in examples])
    trainer = SFTTrainer(model, args=config, train_dataset=dataset, processing_class=tokenizer,
                         peft_config=peft_config)
    fit_and_save(trainer, config, tokenizer)
    (args.output_dir / "log_history.json").write_text(json.dumps(trainer.state.log_history, indent=1) + "\n")
    print(f"saved {config.output_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
