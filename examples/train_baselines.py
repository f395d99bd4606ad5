"""The paper's baselines on the same rollouts: rejection fine-tuning (RFT) and multi-turn DPO.

    python examples/train_baselines.py --method rft --trajectories runs/example/rollouts.jsonl \
        --output_dir runs/example/rft --model_name_or_path <model> --use_peft --bf16 false
    python examples/train_baselines.py --method mtdpo --trajectories runs/example/rollouts.jsonl \
        --output_dir runs/example/mtdpo --model_name_or_path <model> --use_peft --bf16 false

Zero-shot is the base policy evaluated as it is: `python examples/evaluate.py --policy <model>`.
"""

import argparse
from dataclasses import dataclass, field

from trl import ModelConfig, TrlParser

from sweet_trl.baselines import (
    MultiTurnDPOConfig,
    RejectionFinetuneConfig,
    train_multiturn_dpo,
    train_rejection_finetune,
)


@dataclass
class Args:
    method: str = field(default="rft", metadata={"help": "'rft' or 'mtdpo'; --help lists the options of the method given."})
    trajectories: str = field(default="runs/example/rollouts.jsonl", metadata={"help": "Rollouts (JSONL or dataset)."})


if __name__ == "__main__":
    # The method decides which trainer's options the full parser accepts, so it is read first.
    first = argparse.ArgumentParser(add_help=False)
    first.add_argument("--method", choices=("rft", "mtdpo"), default="rft")
    method = first.parse_known_args()[0].method
    config_class = RejectionFinetuneConfig if method == "rft" else MultiTurnDPOConfig
    args, config, model_config = TrlParser([Args, config_class, ModelConfig]).parse_args_and_config()
    train = train_rejection_finetune if method == "rft" else train_multiturn_dpo
    print("saved to", train(config, args.trajectories, model_config=model_config))
