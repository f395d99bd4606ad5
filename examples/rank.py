"""Score every candidate turn with the trained critic (given the privileged `c` of its task).

    python examples/rank.py --candidates runs/example/candidates --critic runs/example/critic \
        --ranking critic_minus_policy_logprob --output_dir runs/example/ranked
"""

from dataclasses import dataclass, field

from trl import TrlParser

from sweet_trl.critic import SweetCritic
from sweet_trl.turn_pairs import TurnPairsConfig, rank_candidates


@dataclass
class Args:
    candidates: str = field(default="runs/example/candidates", metadata={"help": "Output of sample_candidates.py."})
    critic: str = field(default="runs/example/critic", metadata={"help": "Critic folder (from train_critic.py)."})
    output_dir: str = field(default="runs/example/ranked", metadata={"help": "Candidates with their critic scores."})


if __name__ == "__main__":
    args, config = TrlParser([Args, TurnPairsConfig]).parse_args_and_config()
    critic = SweetCritic.from_pretrained(args.critic, batch_size=config.scoring_batch_size)
    ranked = rank_candidates(args.candidates, critic, config, output_dir=args.output_dir)
    print(f"ranked {len(ranked)} turn states")
