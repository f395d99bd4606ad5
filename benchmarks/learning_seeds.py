"""Seed spreads of the critic's learning claims: the sweep behind tests/test_learning_critic.py, over more seeds
and with and without the per-turn regulariser.

    python benchmarks/learning_seeds.py                          # seeds 0-9, turn_advantage_l2 0 and 0.1
    python benchmarks/learning_seeds.py --seeds 0-4 --l2 0.1     # exactly what the default test suite runs
    python benchmarks/learning_seeds.py --json results/learning_seeds.json

Setting (the test's): ``failure="wrong_detail"`` synthetic trajectories (the successful trajectory asks about the
unit hidden in the task's ground truth c, the failed one about the other unit, at the same turn; three agent turns),
128 training tasks and 48 held-out tasks per seed drawn from disjoint pools (requests, fillers, answers,
privileged texts; ``tests/helpers_learning.py``), a tiny random-init Llama per seed, 3 epochs at lr 5e-3, batch 8.
For each seed and regulariser coefficient it trains the critic with c and without c and prints:

- held-out pair accuracy with c and without c (fraction of held-out pairs ranked right) and their gap;
- credit: the share of held-out successes whose decisive turn has the largest advantage ("top") and of held-out
  failures whose decisive turn has the lowest ("bottom"); chance is 1/3 for both;
- the mean advantage of the turns before, at and after the decisive one, on successes (S) and failures (F);
- CPU seconds per training (one thread).

Then the median (min-max) of each over the seeds. Figures are in RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def parse_seeds(text: str) -> list[int]:
    if "-" in text:
        start, end = text.split("-")
        return list(range(int(start), int(end) + 1))
    return [int(s) for s in text.split(",")]


def credit(critic, records) -> dict:
    advantages = critic.turn_advantages(records)
    top, bottom, by_place = [], [], {}
    for values, record in zip(advantages, records):
        order = sorted(range(len(values)), key=values.__getitem__)
        decisive = record["decisive_turn"]
        if record["success"]:
            top.append(order[-1] == decisive)
        else:
            bottom.append(order[0] == decisive)
        for turn, value in enumerate(values):
            place = "<" if turn < decisive else "=" if turn == decisive else ">"
            by_place.setdefault(("S" if record["success"] else "F") + place, []).append(value)
    return {"top": statistics.mean(top), "bottom": statistics.mean(bottom),
            "mean_advantage": {k: round(statistics.mean(v), 3) for k, v in sorted(by_place.items())}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="0-9", help="e.g. 0-9 or 0,3,5")
    parser.add_argument("--l2", default="0,0.1", help="turn_advantage_l2 values, comma-separated")
    parser.add_argument("--json", help="write every figure to this file")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(1)
    import transformers

    transformers.logging.set_verbosity_error()
    import test_learning_critic as setting
    from helpers_learning import learning_tokenizer, split_trajectories
    from helpers_tiny_models import tiny_causal_lm

    from sweet_trl.critic import SweetCritic
    from sweet_trl.critic_trainer import SweetCriticTrainer
    from sweet_trl.pairs import critic_pair_dataset

    tokenizer = learning_tokenizer()
    results = []
    for l2 in [float(v) for v in args.l2.split(",")]:
        for seed in parse_seeds(args.seeds):
            train, held_out = split_trajectories(setting.NUM_TRAIN_TASKS, setting.NUM_HELD_OUT_TASKS, seed=seed,
                                                 **setting.KIND)
            train_pairs, held_out_pairs = critic_pair_dataset(train), critic_pair_dataset(held_out)
            row = {"l2": l2, "seed": seed}
            for use_privileged in (True, False):
                start = time.process_time()
                trainer = SweetCriticTrainer(
                    tiny_causal_lm(tokenizer, seed=seed),
                    args=setting.critic_config(f"/tmp/learning_seeds/{l2}-{seed}", seed, use_privileged),
                    train_dataset=train_pairs, eval_dataset=held_out_pairs, processing_class=tokenizer,
                    turn_advantage_l2=l2)
                trainer.train()
                row["cpu_s"] = round(time.process_time() - start, 1)
                key = "with_c" if use_privileged else "without_c"
                row[key] = trainer.evaluate()["eval_pair_accuracy"]
                if use_privileged:
                    row.update(credit(SweetCritic.from_trainer(trainer), held_out))
            row["gap"] = row["with_c"] - row["without_c"]
            results.append(row)
            print(f"l2 {l2} seed {seed}: accuracy with c {row['with_c']:.3f} without c {row['without_c']:.3f}; "
                  f"decisive turn top on successes {row['top']:.3f}, bottom on failures {row['bottom']:.3f}; "
                  f"mean advantage {row['mean_advantage']}; {row['cpu_s']} CPU s per training", flush=True)
    print("\nmedian (min-max) over seeds; chance for top/bottom is 0.333")
    print("| turn_advantage_l2 | accuracy with c | without c | gap | decisive top (successes) | decisive bottom "
          "(failures) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for l2 in sorted({r["l2"] for r in results}):
        rows = [r for r in results if r["l2"] == l2]

        def cell(key, rows=rows):
            values = [r[key] for r in rows]
            return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"

        print(f"| {l2} | {cell('with_c')} | {cell('without_c')} | {cell('gap')} | {cell('top')} | "
              f"{cell('bottom')} |")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
