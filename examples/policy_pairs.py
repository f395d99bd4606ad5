"""Turn-level preference pairs: a candidate from the critic's upper half over one from its lower half.

    python examples/policy_pairs.py --ranked runs/example/ranked --pairs_per_turn 4 \
        --output_dir runs/example/turn_pairs
"""

from dataclasses import dataclass, field

from trl import TrlParser

from sweet_trl.turn_pairs import TurnPairsConfig, build_turn_pairs


@dataclass
class Args:
    ranked: str = field(default="runs/example/ranked", metadata={"help": "Output of rank.py."})
    output_dir: str = field(default="runs/example/turn_pairs", metadata={"help": "Dataset folder of turn pairs."})


if __name__ == "__main__":
    args, config = TrlParser([Args, TurnPairsConfig]).parse_args_and_config()
    pairs = build_turn_pairs(args.ranked, config, output_dir=args.output_dir)
    print(f"{len(pairs)} turn-level pairs")
