"""bf16 against float32 on this CPU: seconds per LoRA training step and per batch of sampled answers.

The embedded SmolLM2-135M-Instruct. Training: LoRA r 16 on every linear layer, batches of 4 procedural dialogues
(the backend instructions, a task's request, a question, the human's reply, the reference function as the answer),
forward and backward with the loss on every token; float32 steps and bf16-autocast steps (float32 weights, what
``bf16: true`` does without a GPU, sweet_trl.precision) alternate on one model, so that both see the same batches
and the same machine load; the first step of each is warm-up. Sampling: the transformers backend with float32 and
with bf16 weights (``dtype: bfloat16``), 16 first-turn prompts x 8 samples of 48 tokens at temperature 0.7, after a
warm-up batch. Also printed: whether the CPU has native bf16 (AVX512-BF16 or AMX; without it bf16 is emulated and
slower) and the largest difference between the two settings' training losses.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bf16_cpu.py
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bf16_cpu.py --steps 6 --json benchmarks/results/bf16_cpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any


def dialogues(tokenizer: Any, count: int) -> list[list[int]]:
    from colbench_gym.envs.backend import BACKEND_INSTRUCTIONS
    from colbench_gym.tasks.procedural import generate_tasks

    rows = generate_tasks(count=count, split="train", seed=0)
    return [tokenizer.apply_chat_template([
        {"role": "system", "content": BACKEND_INSTRUCTIONS.format(max_turns=2, marker="I WANT TO ANSWER:")},
        {"role": "user", "content": row["problem_description"]},
        {"role": "assistant", "content": "Which value should the function use?"},
        {"role": "user", "content": "Use the value the description leaves open, as the tests expect."},
        {"role": "assistant", "content": f"I WANT TO ANSWER:\n```python\n{row['ground_truth']}\n```"},
    ], return_dict=True)["input_ids"] for row in rows]


def training_steps(steps: int, batch_size: int = 4) -> dict[str, Any]:
    import peft
    import torch

    from sweet_trl.pipeline.models import load_causal_lm, resolve_model

    model, tokenizer = load_causal_lm(resolve_model("embedded"))
    model = peft.get_peft_model(model, peft.LoraConfig(r=16, lora_alpha=32, target_modules="all-linear",
                                                       task_type="CAUSAL_LM"))
    sequences = dialogues(tokenizer, batch_size * (steps + 1))
    seconds: dict[str, list[float]] = {"float32": [], "bf16": []}
    losses: dict[str, list[float]] = {"float32": [], "bf16": []}
    for step in range(steps + 1):
        batch = sequences[step * batch_size: (step + 1) * batch_size]
        width = max(map(len, batch))
        input_ids = torch.tensor([ids + [tokenizer.pad_token_id] * (width - len(ids)) for ids in batch])
        mask = torch.tensor([[1] * len(ids) + [0] * (width - len(ids)) for ids in batch])
        labels = input_ids.masked_fill(mask == 0, -100)
        for name in (("float32", "bf16") if step % 2 else ("bf16", "float32")):
            start = time.perf_counter()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=name == "bf16"):
                loss = model(input_ids=input_ids, attention_mask=mask, labels=labels).loss
            loss.backward()
            model.zero_grad()  # no update: both settings see the same weights at every step
            if step:
                seconds[name].append(time.perf_counter() - start)
                losses[name].append(loss.item())
    return {"tokens_per_step": batch_size * statistics.fmean(map(len, sequences)), "seconds": seconds,
            "losses": losses}


def sampling_batches(prompts: int, samples: int) -> dict[str, float]:
    import gymnasium as gym

    import colbench_gym  # noqa: F401  (registers the environments)
    from sweet_trl.generation import SamplingParams, TransformersBackend

    env = gym.make("ColBench-Backend-v0", tasks="procedural:train")
    histories = [[{"role": "user", "content": env.reset(seed=seed)[0]}] for seed in range(prompts)]
    sampling = SamplingParams(temperature=0.7, max_new_tokens=48, seed=0)
    seconds = {}
    for dtype in ("float32", "bfloat16"):
        backend = TransformersBackend("embedded", dtype=dtype, max_batch_size=128, prefix_cache_mb=0)
        backend.generate(histories[:2], n=2, sampling=sampling)
        start = time.perf_counter()
        backend.generate(histories, n=samples, sampling=sampling)
        seconds[dtype] = time.perf_counter() - start
        del backend
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=4, help="training steps timed in each setting")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    from sweet_trl.precision import cpu_has_native_bf16

    native = cpu_has_native_bf16()
    print(f"native bf16 on this CPU: {native}")
    training = training_steps(args.steps)
    step = {name: statistics.median(values) for name, values in training["seconds"].items()}
    loss_gap = max(abs(a - b) for a, b in zip(*training["losses"].values()))
    sampling = sampling_batches(16, 8)
    result = {
        "native_bf16": native, "steps": args.steps, "tokens_per_step": training["tokens_per_step"],
        "train_seconds_per_step": step, "train_time_ratio_bf16": step["bf16"] / step["float32"],
        "max_loss_difference": loss_gap, "sampling_seconds": sampling,
        "sampling_time_ratio_bf16": sampling["bfloat16"] / sampling["float32"], "training": training,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "processor": _cpu_name()},
    }
    print(f"LoRA step ({training['tokens_per_step']:.0f} tokens): float32 {step['float32']:.2f} s, bf16 "
          f"{step['bf16']:.2f} s (x{result['train_time_ratio_bf16']:.2f} the time); largest loss difference "
          f"{loss_gap:.3f}")
    print(f"sampling 128 answers: float32 {sampling['float32']:.1f} s, bf16 {sampling['bfloat16']:.1f} s "
          f"(x{result['sampling_time_ratio_bf16']:.2f} the time)")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


def _cpu_name() -> str:
    try:
        return next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor()


if __name__ == "__main__":
    raise SystemExit(main())
