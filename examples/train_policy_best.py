"""Fine-tune the policy on the critic's top candidate of each ranked turn state (best-of-N, instead of DPO pairs).

    # CPU, LoRA on the embedded SmolLM2, answer turns only (max_turns 2)
    python examples/train_policy_best.py --ranked runs/example/ranked --output_dir runs/example/policy_best \
        --model_name_or_path $(python -c "from sweet_trl.generation import embedded_model_path as p; print(p())") \
        --use_peft --lora_r 16 --lora_target_modules all-linear --learning_rate 1e-4 --bf16 false \
        --gradient_checkpointing false --max_length 2048 --turns 1

    # 8 GPUs, QLoRA on Llama-3.1-8B-Instruct
    accelerate launch --config_file examples/accelerate/ddp.yaml --num_processes 8 examples/train_policy_best.py \
        --ranked runs/example/ranked --output_dir runs/example/policy_best \
        --model_name_or_path meta-llama/Llama-3.1-8B-Instruct --use_peft --load_in_4bit --learning_rate 1e-5
"""

from dataclasses import dataclass, field

from trl import ModelConfig, TrlParser

from sweet_trl.best_of_n import BestOfNFinetuneConfig, train_best_of_n


@dataclass
class Args:
    ranked: str = field(default="runs/example/ranked", metadata={"help": "Output of rank.py."})


if __name__ == "__main__":
    args, config, model_config = TrlParser([Args, BestOfNFinetuneConfig, ModelConfig]).parse_args_and_config()
    print("saved to", train_best_of_n(config, args.ranked, model_config=model_config))
