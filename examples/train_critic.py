"""Train the SWEET-RL critic: Bradley-Terry on trajectory pairs, turn advantages from log-ratios given `c`.

    # CPU, LoRA on the embedded SmolLM2 (see `python -c "from sweet_trl.generation import embedded_model_path as p; print(p())"`)
    python examples/train_critic.py --pairs runs/example/critic_pairs.jsonl --output_dir runs/example/critic \
        --model_name_or_path $(python -c "from sweet_trl.generation import embedded_model_path as p; print(p())") \
        --use_peft --lora_r 16 --lora_target_modules all-linear --learning_rate 1e-4 --bf16 false \
        --gradient_checkpointing false --max_length 2048

    # 8 GPUs, QLoRA on Llama-3.1-8B-Instruct
    accelerate launch --config_file examples/accelerate/ddp.yaml --num_processes 8 examples/train_critic.py \
        --pairs runs/example/critic_pairs.jsonl --output_dir runs/example/critic \
        --model_name_or_path meta-llama/Llama-3.1-8B-Instruct --use_peft --load_in_4bit --learning_rate 1e-5
"""

from dataclasses import dataclass, field

from trl import ModelConfig, TrlParser

from sweet_trl.critic_config import SweetCriticConfig
from sweet_trl.critic_trainer import SweetCriticTrainer
from sweet_trl.trainer_utils import load_rows, trainer_inputs


@dataclass
class Args:
    pairs: str = field(default="runs/example/critic_pairs.jsonl", metadata={"help": "Output of critic_pairs.py."})


if __name__ == "__main__":
    args, config, model_config = TrlParser([Args, SweetCriticConfig, ModelConfig]).parse_args_and_config()
    model, tokenizer, peft_config, quantization_config = trainer_inputs(config, model_config)
    trainer = SweetCriticTrainer(model, args=config, train_dataset=load_rows(args.pairs), processing_class=tokenizer,
                                 peft_config=peft_config, quantization_config=quantization_config)
    trainer.train()
    trainer.save_model()  # weights or adapter, tokenizer, sweet_critic.json, model card
