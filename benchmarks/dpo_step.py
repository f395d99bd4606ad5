"""Seconds per training pass (forward and backward, policy and reference) of the turn-level DPO trainer with
shared prompts (``share_prompt=True``, :mod:`sweet_trl.shared_prompt`) against TRL's pass over each sequence.

The embedded SmolLM2-135M-Instruct with LoRA r 16 on every linear layer, float32 on CPU, batches of 2 pairs (the
study's micro-batch), on turn pairs shaped like ``make demo``'s: the backend system prompt, a procedural task's
request, a first guess and the human's reply as the prompt, the reference function and a wrong one as the two
answers. One trainer; each batch is run plainly and shared, in alternating order, so that both settings see the
same batches and the same machine load; the first batch is warm-up and not counted. The adapter is moved off zero
first, so that the policy differs from its reference. Also printed: the largest difference between the two
settings' losses, which should be float rounding.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/dpo_step.py
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/dpo_step.py --batches 12 --json results/dpo_step.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any


def demo_shaped_pairs(count: int) -> list[dict[str, Any]]:
    from colbench_gym.envs.backend import BACKEND_INSTRUCTIONS
    from colbench_gym.tasks.procedural import generate_tasks

    pairs = []
    for row in generate_tasks(count=count, split="train", seed=0):
        signature = row["ground_truth"].splitlines()[0]
        guess = f"Here is a Python function for it:\n```python\n{signature}\n    return 0\n```"
        prompt = [{"role": "system", "content": BACKEND_INSTRUCTIONS.format(max_turns=2, marker="I WANT TO ANSWER:")},
                  {"role": "user", "content": row["problem_description"]},
                  {"role": "assistant", "content": guess},
                  {"role": "user", "content": "It depends on the exact rule I use; the result is what the reference "
                                              "says, rounded the way our team always rounds it."}]
        answer = "I WANT TO ANSWER:\n```python\n{}```"
        pairs.append({"prompt": prompt,
                      "chosen": [{"role": "assistant", "content": answer.format(row["ground_truth"])}],
                      "rejected": [{"role": "assistant", "content": answer.format(f"{signature}\n    return 0\n")}]})
    return pairs


def interleaved_passes(pairs: list[dict[str, Any]], batches: int, workdir: Path) -> dict[str, Any]:
    import torch
    from peft import LoraConfig

    from sweet_trl.pipeline.models import load_causal_lm, resolve_model
    from sweet_trl.policy_config import TurnPreferenceConfig
    from sweet_trl.policy_trainer import TurnPreferenceTrainer

    model, tokenizer = load_causal_lm(resolve_model("embedded"))
    config = TurnPreferenceConfig(
        output_dir=str(workdir), learning_rate=3e-4, beta=0.1, per_device_train_batch_size=2, max_length=1024,
        bf16=False, use_cpu=True, gradient_checkpointing=False, report_to="none", disable_tqdm=True, seed=0)
    trainer = TurnPreferenceTrainer(model, args=config, train_dataset=pairs, processing_class=tokenizer,
                                    peft_config=LoraConfig(r=16, lora_alpha=32, target_modules="all-linear",
                                                           task_type="CAUSAL_LM"))
    trainer.model.train()
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():  # an adapter away from zero: the policy differs from its reference, as after a few steps
        for name, parameter in trainer.model.named_parameters():
            if "lora_B" in name:
                parameter.copy_(0.01 * torch.randn(parameter.shape, generator=generator))
    seconds: dict[str, list[float]] = {"plain": [], "shared": []}
    losses: dict[str, list[float]] = {"plain": [], "shared": []}
    for index, batch in zip(range(batches + 1), itertools.cycle(trainer.get_train_dataloader())):
        order = ("plain", "shared") if index % 2 == 0 else ("shared", "plain")
        for name in order:
            trainer.args.share_prompt = name == "shared"
            trainer.model.zero_grad()
            started = time.perf_counter()
            loss = trainer.compute_loss(trainer.model, batch)
            loss.backward()
            if index:  # the first batch warms up both paths
                seconds[name].append(time.perf_counter() - started)
                losses[name].append(loss.item())
        if index:
            print(f"batch {index}: plain {seconds['plain'][-1]:.2f} s, shared {seconds['shared'][-1]:.2f} s",
                  flush=True)
    return {"seconds": seconds, "losses": losses}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=10, help="batches of 2 pairs timed in each setting")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    from transformers import AutoTokenizer

    from sweet_trl.pipeline.models import resolve_model

    pairs = demo_shaped_pairs(2 * (args.batches + 1))
    tokenizer = AutoTokenizer.from_pretrained(resolve_model("embedded"))
    prompt_tokens = statistics.fmean(
        len(tokenizer.apply_chat_template(p["prompt"], add_generation_prompt=True, return_dict=True)["input_ids"])
        for p in pairs)
    message_tokens = statistics.fmean(len(tokenizer(p[k][0]["content"])["input_ids"]) for p in pairs
                                      for k in ("chosen", "rejected"))
    print(f"{len(pairs)} pairs: {prompt_tokens:.0f} prompt tokens, {message_tokens:.0f} message tokens on average")
    with tempfile.TemporaryDirectory() as workdir:
        measured = interleaved_passes(pairs, args.batches, Path(workdir))
    seconds, losses = measured["seconds"], measured["losses"]
    mean = {name: statistics.fmean(values) for name, values in seconds.items()}
    ratios = [p / s for p, s in zip(seconds["plain"], seconds["shared"])]
    loss_gap = max(abs(a - b) for a, b in zip(losses["plain"], losses["shared"]))
    result = {
        "pairs": len(pairs), "prompt_tokens": prompt_tokens, "message_tokens": message_tokens,
        "batches": args.batches, "pairs_per_batch": 2, "seconds_per_pass": mean,
        "speedup": mean["plain"] / mean["shared"], "speedup_median_per_batch": statistics.median(ratios),
        "max_loss_difference": loss_gap, "seconds": seconds,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
    }
    print(f"seconds per pass: plain {mean['plain']:.2f}, shared prompts {mean['shared']:.2f} (x{result['speedup']:.2f}, "
          f"median per batch x{result['speedup_median_per_batch']:.2f}); largest loss difference {loss_gap:.2e}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
