"""Pair trajectories of the same task with different rewards: the training data of the SWEET-RL critic.

    python examples/critic_pairs.py --trajectories runs/example/rollouts.jsonl --preset backend \
        --output runs/example/critic_pairs.jsonl

Presets are the released recipes: `backend` pairs a task's best trajectory (when it passed every test) with each
worse one; `frontend` pairs every two trajectories whose similarity differs by at least 0.1.
"""

import json
from dataclasses import dataclass, field
from pathlib import Path

from trl import TrlParser

from sweet_trl.pairs import PAIR_RULE_PRESETS, build_critic_pairs


@dataclass
class Args:
    trajectories: str = field(default="runs/example/rollouts.jsonl", metadata={"help": "Rollouts (JSONL)."})
    preset: str = field(default="backend", metadata={"help": "'backend' or 'frontend': the released pair recipe."})
    pair_rule: str | None = field(default=None, metadata={"help": "Override: 'best_vs_rest' or 'all_pairs'."})
    require_success: bool | None = field(default=None, metadata={
        "help": "Override: pair a task only if its best trajectory succeeded (false for small models)."})
    min_reward_gap: float | None = field(default=None, metadata={"help": "Override: smallest reward difference."})
    max_pairs_per_task: int | None = field(default=None, metadata={"help": "At most this many pairs per task."})
    output: str = field(default="runs/example/critic_pairs.jsonl", metadata={"help": "JSONL file of pairs."})


if __name__ == "__main__":
    (args,) = TrlParser([Args]).parse_args_and_config()
    if args.preset not in PAIR_RULE_PRESETS:
        raise SystemExit(f"--preset must be one of {sorted(PAIR_RULE_PRESETS)}, got {args.preset!r}")
    rule = dict(PAIR_RULE_PRESETS[args.preset])
    overrides = {"rule": args.pair_rule, "require_success": args.require_success, "min_reward_gap": args.min_reward_gap}
    rule.update({key: value for key, value in overrides.items() if value is not None})
    pairs, stats = build_critic_pairs(args.trajectories, **rule, max_pairs_per_task=args.max_pairs_per_task)
    print(stats.summary())
    if not pairs:
        raise SystemExit("no pair: a pair needs two trajectories of a task with different rewards (and, with "
                         "best_vs_rest, a successful one). Collect more episodes per task, or pass --require_success false.")
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    with open(args.output, "w", encoding="utf-8") as handle:
        handle.writelines(json.dumps(pair) + "\n" for pair in pairs)
