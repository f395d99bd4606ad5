"""The paper's baselines on the same rollouts: rejection fine-tuning (RFT) and multi-turn DPO.

    python examples/train_baselines.py --method rft --trajectories runs/example/rollouts.jsonl \
        --output_dir runs/example/rft --model_name_or_path <model> --use_peft --bf16 false
    python examples/train_baselines.py --method mtdpo --trajectories runs/example/rollouts.jsonl \
        --output_dir runs/example/mtdpo --model_name_or_path <model> --use_peft --bf16 false

Zero-shot is the base policy evaluated as it is: `python examples/evaluate.py --policy <model>`.
"""

import sys
from dataclasses import dataclass

from trl import ModelConfig, TrlParser

from sweet_trl.baselines import (
    MultiTurnDPOConfig,
    RejectionFinetuneConfig,
    train_multiturn_dpo,
    train_rejection_finetune,
)


@dataclass
class Args:
    method: str = "rft"
    trajectories: str = "runs/example/rollouts.jsonl"


if __name__ == "__main__":
    method = sys.argv[sys.argv.index("--method") + 1] if "--method" in sys.argv else "rft"
    config_class = RejectionFinetuneConfig if method == "rft" else MultiTurnDPOConfig
    args, config, model_config = TrlParser([Args, config_class, ModelConfig]).parse_args_and_config()
    train = train_rejection_finetune if args.method == "rft" else train_multiturn_dpo
    print("saved to", train(config, args.trajectories, model_config=model_config))
