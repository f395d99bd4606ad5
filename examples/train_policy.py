"""Train the policy with SWEET-RL's turn-level DPO (plus NLL on the chosen turn) on the critic-ranked pairs.

    # CPU, LoRA on the embedded SmolLM2
    python examples/train_policy.py --pairs runs/example/turn_pairs --output_dir runs/example/policy \
        --model_name_or_path $(python -c "from sweet_trl.generation import embedded_model_path as p; print(p())") \
        --use_peft --lora_r 16 --lora_target_modules all-linear --learning_rate 1e-4 --bf16 false \
        --gradient_checkpointing false --max_length 2048

    # 8 GPUs, QLoRA on Llama-3.1-8B-Instruct
    accelerate launch --config_file examples/accelerate/ddp.yaml --num_processes 8 examples/train_policy.py \
        --pairs runs/example/turn_pairs --output_dir runs/example/policy \
        --model_name_or_path meta-llama/Llama-3.1-8B-Instruct --use_peft --load_in_4bit --learning_rate 1e-5
"""

from dataclasses import dataclass, field

from trl import ModelConfig, TrlParser

from sweet_trl.policy_config import TurnPreferenceConfig
from sweet_trl.policy_trainer import train_turn_preference


@dataclass
class Args:
    pairs: str = field(default="runs/example/turn_pairs", metadata={"help": "Output of policy_pairs.py."})


if __name__ == "__main__":
    args, config, model_config = TrlParser([Args, TurnPreferenceConfig, ModelConfig]).parse_args_and_config()
    print("saved to", train_turn_preference(config, args.pairs, model_config=model_config))
