"""Turn states from the trajectories, and N candidate next turns per state sampled from the policy.

    python examples/sample_candidates.py --trajectories runs/example/rollouts.jsonl --policy embedded \
        --num_candidates 16 --state_fraction 0.1 --max_new_tokens 128 --output_dir runs/example/candidates

The prompts are what the policy saw (system instructions and the dialogue so far), never the privileged `c`.
Interrupted? The same command resumes from `runs/example/candidates.partial.jsonl`.
"""

from dataclasses import dataclass, field

from trl import TrlParser

from sweet_trl.generation import TransformersBackend
from sweet_trl.turn_pairs import TurnPairsConfig, sample_candidates, select_turn_states


@dataclass
class Args:
    trajectories: str = field(default="runs/example/rollouts.jsonl", metadata={"help": "Rollouts (JSONL)."})
    policy: str = field(default="embedded", metadata={"help": "Model folder, Hub id, or 'embedded'."})
    output_dir: str = field(default="runs/example/candidates", metadata={"help": "Candidates per turn state."})


if __name__ == "__main__":
    args, config = TrlParser([Args, TurnPairsConfig]).parse_args_and_config()
    states = select_turn_states(args.trajectories, config, output_dir=args.output_dir + "-states")
    candidates = sample_candidates(states, TransformersBackend(args.policy), config, output_dir=args.output_dir)
    print(f"{len(states)} turn states, {sum(map(len, candidates['candidates']))} candidates")
