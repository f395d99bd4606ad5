"""Memory and speed of the SWEET-RL trainers at the paper's model size: an 8B Llama, QLoRA or bf16 LoRA.

Trains the critic (:class:`sweet_trl.critic_trainer.SweetCriticTrainer`, Bradley-Terry loss over trajectory pairs)
and the turn-level policy trainer (:class:`sweet_trl.policy_trainer.TurnPreferenceTrainer`, DPO + NLL over turn
pairs) for a few optimizer steps on synthetic ten-turn dialogues of ``--seq-len`` tokens, and reports for each
(trainer, mode): peak GPU memory (``torch.cuda.max_memory_allocated`` / ``max_memory_reserved``) and training
tokens per second after warm-up.

The model has Llama-3.1-8B's shape (hidden 4096, 32 layers, 32 heads, 8 KV heads, MLP 14336, vocabulary 128256,
RoPE theta 500000) with random weights: nothing is downloaded. It is written once to local disk in bf16
safetensors (16 GB) and each run loads it by path, exactly as a user's run loads a Hub checkpoint, through the
trainer's own ``quantization_config`` / ``peft_config`` arguments:

- ``qlora``: 4-bit NF4 weights with double quantisation and bf16 compute (``BitsAndBytesConfig``), LoRA rank 16 on
  every linear layer, adapters in bf16;
- ``lora-bf16``: the same LoRA on the unquantised bf16 model.

Micro-batch 1 (one pair per forward), gradient accumulation, gradient checkpointing, AdamW. Each (trainer, mode)
runs in a fresh process so its peak memory is its own. The paper's critic target is one 24 GB GPU (QLoRA).

    python benchmarks/gpu_train.py                                   # GPU: 8B, both trainers, both modes
    python benchmarks/gpu_train.py --trainer critic --mode qlora --steps 3 --seq-len 4096
    python benchmarks/gpu_train.py --size tiny                       # CPU smoke run in seconds (2-layer model)
    python benchmarks/gpu_train.py --size smollm2 --trainer critic --mode lora-bf16 --seq-len 512 --micro-batch 4 \
        --grad-accum 1 --no-gradient-checkpointing --steps 5 --profile  # the credit critic's step, traced
    OUT=results/ python benchmarks/gpu_train.py                      # also writes results/gpu_train.json

Tokens per second counts the non-padding tokens fed to the trained model (chosen + rejected sequence of every pair;
the reference forward over the same tokens is not counted again) divided by wall time per optimizer step, data
loading and the optimizer step included, averaged over the steps after ``--warmup-steps``.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import hashlib
import json
import math
import os
import platform
import random
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # run as a script from a checkout
    sys.path.insert(0, str(REPO_ROOT))

TRAINERS = ("critic", "policy")
MODES = ("qlora", "lora-bf16")
GIB = 1024**3
TARGET_GPU_GB = 24  # the paper-scale critic should train on one 24 GB card

# Llama-3.1-8B's architecture (config.json of meta-llama/Llama-3.1-8B-Instruct), random weights.
LLAMA_31_8B = dict(
    vocab_size=128256,
    hidden_size=4096,
    intermediate_size=14336,
    num_hidden_layers=32,
    num_attention_heads=32,
    num_key_value_heads=8,
    head_dim=128,
    hidden_act="silu",
    max_position_embeddings=131072,
    rms_norm_eps=1e-5,
    rope_parameters={
        "rope_type": "llama3",
        "rope_theta": 500000.0,
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
    tie_word_embeddings=False,
    attention_bias=False,
    mlp_bias=False,
    initializer_range=0.02,
)
TINY = dict(
    vocab_size=4096,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    hidden_act="silu",
    max_position_embeddings=4096,
    rms_norm_eps=1e-5,
    rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
    tie_word_embeddings=False,
    initializer_range=0.02,
)
# SmolLM2-135M-Instruct's architecture (the embedded default, the study's policy and critic), random weights: the
# shape the credit study's critic trains on a lent GPU (a step of 4 pairs took 0.84 s on an H200: --profile says why).
SMOLLM2_135M = dict(
    vocab_size=49152,
    hidden_size=576,
    intermediate_size=1536,
    num_hidden_layers=30,
    num_attention_heads=9,
    num_key_value_heads=3,
    head_dim=64,
    hidden_act="silu",
    max_position_embeddings=8192,
    rms_norm_eps=1e-5,
    rope_parameters={"rope_type": "default", "rope_theta": 100000.0},
    tie_word_embeddings=True,
    initializer_range=0.041666666666666664,
)
SIZES = {"8b": LLAMA_31_8B, "smollm2": SMOLLM2_135M, "tiny": TINY}
DEFAULT_SEQ_LEN = {"8b": 4096, "smollm2": 512, "tiny": 256}

# A Llama-3-style chat format over a word-level vocabulary: every whitespace-separated word is exactly one token,
# so a synthetic dialogue has exactly the number of tokens asked for.
SPECIAL_TOKENS = {
    "bos": "<|begin_of_text|>",
    "eos": "<|eot_id|>",
    "pad": "<|finetune_right_pad_id|>",
    "unk": "<|reserved_special_token_0|>",
}
HEADER_TOKENS = ("<|start_header_id|>", "<|end_header_id|>")
ROLE_WORDS = ("system", "user", "assistant")
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "<|start_header_id|>{{ message['role'] }}<|end_header_id|>\n\n"
    "{% if message['role'] == 'assistant' %}"
    "{% generation %}{{ message['content'] }}<|eot_id|>{% endgeneration %}"
    "{% else %}{{ message['content'] }}<|eot_id|>{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)
AGENT_TURNS = 10  # ColBench's limit: the trajectories are as long in turns as they get
MIN_SEQ_LEN = 192  # room for the chat template of ten turns with a few words each


# ---------------------------------------------------------------------------------------------------------------
# Tokenizer and synthetic data

def synthetic_words(count: int) -> list[str]:
    return [f"w{i}" for i in range(count)]


def build_tokenizer(vocab_words: int):
    """A word-level tokenizer with a Llama-3-style chat template (no download; one token per word)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = [SPECIAL_TOKENS["pad"], SPECIAL_TOKENS["bos"], SPECIAL_TOKENS["eos"], SPECIAL_TOKENS["unk"],
                *HEADER_TOKENS]
    vocab = {token: i for i, token in enumerate([*specials, *ROLE_WORDS, *synthetic_words(vocab_words)])}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token=SPECIAL_TOKENS["unk"]))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.add_special_tokens(specials)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=SPECIAL_TOKENS["bos"],
        eos_token=SPECIAL_TOKENS["eos"],
        pad_token=SPECIAL_TOKENS["pad"],
        unk_token=SPECIAL_TOKENS["unk"],
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def count_tokens(tokenizer, messages: list[dict[str, str]], add_generation_prompt: bool = False) -> int:
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def fill_to_length(tokenizer, messages: list[dict[str, str]], target: int, rng: random.Random,
                   words: list[str], weights: list[float], overhead_messages: list[dict[str, str]] | None = None
                   ) -> list[dict[str, str]]:
    """Give ``messages`` random word content so that ``overhead_messages + messages`` render to ``target`` tokens.

    ``weights`` split the content budget between the messages (e.g. long code answers, short questions).
    """
    skeleton = [{"role": m["role"], "content": ""} for m in messages]
    overhead = count_tokens(tokenizer, (overhead_messages or []) + skeleton)
    budget = target - overhead
    if budget < len(messages):
        raise ValueError(f"--seq-len {target} is too short for {len(messages)} messages ({overhead} template tokens)")
    total = sum(weights)
    sizes = [max(1, int(budget * w / total)) for w in weights]
    sizes[-1] += budget - sum(sizes)
    return [{"role": m["role"], "content": " ".join(rng.choices(words, k=n))} for m, n in zip(messages, sizes)]


def privileged_text(tokenizer, rng: random.Random, words: list[str], length: int) -> str:
    return " ".join(rng.choices(words, k=length))


def critic_pairs(tokenizer, count: int, seq_len: int, seed: int, privileged_template: str) -> list[dict[str, Any]]:
    """Critic pair rows (``sweet_trl.pairs`` format) whose two critic inputs are each ``seq_len`` tokens long.

    A ten-turn ColBench trajectory: the problem, nine (question, answer) exchanges and the final code answer;
    the privileged information (the reference solution) takes an eighth of the sequence.
    """
    rng = random.Random(seed)
    words = synthetic_words(len(tokenizer) - 16)
    rows = []
    for index in range(count):
        privileged = privileged_text(tokenizer, rng, words, max(4, seq_len // 8))
        system = [{"role": "system", "content": privileged_template.replace("{privileged}", privileged)}]
        trajectories = []
        for _ in range(2):
            roles = ["user"] + ["assistant", "user"] * (AGENT_TURNS - 1) + ["assistant"]
            weights = [2.0] + [1.0, 1.5] * (AGENT_TURNS - 1) + [4.0]
            dialogue = fill_to_length(tokenizer, [{"role": r} for r in roles], seq_len - 2, rng, words, weights,
                                      overhead_messages=system)
            trajectories.append(dialogue)
        rows.append({
            "task_id": f"synthetic-{index}",
            "privileged": privileged,
            "chosen": trajectories[0],
            "rejected": trajectories[1],
            "chosen_reward": 1.0,
            "rejected_reward": 0.0,
            "chosen_task_id": f"synthetic-{index}",
            "rejected_task_id": f"synthetic-{index}",
            "chosen_episode_id": f"synthetic-{index}/0",
            "rejected_episode_id": f"synthetic-{index}/1",
        })
    return rows


def policy_pairs(tokenizer, count: int, seq_len: int, seed: int) -> list[dict[str, Any]]:
    """Turn-level pair rows (``{"prompt", "chosen", "rejected"}``) with prompt + message = ``seq_len`` tokens.

    The prompt is the system instructions and a late state of a ten-turn dialogue (ending with the human's reply);
    chosen and rejected are one agent message each, of equal length.
    """
    rng = random.Random(seed)
    words = synthetic_words(len(tokenizer) - 16)
    message_tokens = max(4, min(512, seq_len // 8))
    rows = []
    for _ in range(count):
        roles = ["system", "user"] + ["assistant", "user"] * (AGENT_TURNS - 1)
        weights = [2.0, 2.0] + [1.0, 1.5] * (AGENT_TURNS - 1)
        # the prompt renders with the generation prompt; the message adds its content and the end-of-turn token
        probe = [{"role": "user", "content": "w0"}]
        generation_prompt = count_tokens(tokenizer, probe, add_generation_prompt=True) - count_tokens(tokenizer, probe)
        prompt = fill_to_length(tokenizer, [{"role": r} for r in roles],
                                seq_len - message_tokens - generation_prompt - 1 - 2, rng, words, weights)
        chosen, rejected = (" ".join(rng.choices(words, k=message_tokens)) for _ in range(2))
        rows.append({
            "prompt": prompt,
            "chosen": [{"role": "assistant", "content": chosen}],
            "rejected": [{"role": "assistant", "content": rejected}],
        })
    return rows


# ---------------------------------------------------------------------------------------------------------------
# The random model on disk

def model_parameters(size: str) -> int:
    """Parameter count of a Llama of ``size`` (no biases), without building it."""
    c = SIZES[size]
    head_dim = c["head_dim"]
    attention = c["hidden_size"] * head_dim * (2 * c["num_attention_heads"] + 2 * c["num_key_value_heads"])
    mlp = 3 * c["hidden_size"] * c["intermediate_size"]
    layer = attention + mlp + 2 * c["hidden_size"]
    embeddings = (1 if c.get("tie_word_embeddings") else 2) * c["vocab_size"] * c["hidden_size"]
    return c["num_hidden_layers"] * layer + embeddings + c["hidden_size"]


def model_dir_for(size: str, cache_dir: Path) -> Path:
    digest = hashlib.sha256(json.dumps(SIZES[size], sort_keys=True).encode()).hexdigest()[:10]
    return cache_dir / f"llama-{size}-random-{digest}"


def build_random_model(size: str, path: Path, vocab_words: int) -> dict[str, Any]:
    """Write a randomly initialised Llama of ``size`` in bf16 safetensors and the tokenizer to ``path``.

    The weights are drawn on the GPU when there is one (seconds for 8B) and saved once; later runs reuse them.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    start = time.perf_counter()
    tokenizer = build_tokenizer(vocab_words)
    values = dict(SIZES[size])
    config = LlamaConfig(**values, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, dtype="bfloat16")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    default_dtype = torch.get_default_dtype()
    torch.manual_seed(0)
    try:
        torch.set_default_dtype(torch.bfloat16)
        with torch.device(device):
            model = LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(default_dtype)
    partial = path.with_name(path.name + ".partial")
    model.save_pretrained(partial, max_shard_size="4GB")
    tokenizer.save_pretrained(partial)
    parameters = sum(p.numel() for p in model.parameters())
    del model
    partial.rename(path)  # only a complete model is ever reused
    return {"path": str(path), "parameters": parameters, "seconds": round(time.perf_counter() - start, 1)}


# ---------------------------------------------------------------------------------------------------------------
# One (trainer, mode) run

class TokenCounter:
    """Counts the non-padding tokens of every micro-batch the trainer trains on.

    Wraps ``trainer.training_step`` rather than the collator: the data loader collates ahead of use.
    """

    def __init__(self, trainer):
        self.tokens = 0
        training_step = trainer.training_step

        def counted_training_step(model, inputs, *args, **kwargs):
            self.tokens += self.count(inputs)
            return training_step(model, inputs, *args, **kwargs)

        trainer.training_step = counted_training_step

    @staticmethod
    def count(batch) -> int:
        masks = [v for k, v in batch.items() if k == "attention_mask" or k.endswith("_attention_mask")]
        if masks:
            return int(sum(int(m.sum()) for m in masks))
        return int(sum(v.numel() for k, v in batch.items() if k.endswith("input_ids")))


def make_step_recorder(counter: TokenCounter, warmup_steps: int, cuda: bool):
    """A ``TrainerCallback`` recording each optimizer step's wall time, tokens, loss and (after warm-up) memory."""
    import torch
    from transformers import TrainerCallback

    class StepRecorder(TrainerCallback):
        def __init__(self):
            self.steps: list[dict[str, Any]] = []
            self.losses: list[float] = []
            self.warmup_peak = {"allocated": 0, "reserved": 0}  # bytes, before the reset at the end of warm-up
            self._last_time = None
            self._last_tokens = 0

        def _now(self) -> float:
            if cuda:
                torch.cuda.synchronize()
            return time.perf_counter()

        def on_train_begin(self, args, state, control, **kwargs):
            self._last_time = self._now()
            self._last_tokens = counter.tokens

        def on_step_end(self, args, state, control, **kwargs):
            now = self._now()
            self.steps.append({"seconds": now - self._last_time, "tokens": counter.tokens - self._last_tokens})
            self._last_time, self._last_tokens = now, counter.tokens
            if cuda and len(self.steps) == warmup_steps:  # from here on: the steady state, optimizer state included
                stats = torch.cuda.memory_stats()
                self.warmup_peak = {"allocated": stats["allocated_bytes.all.peak"],
                                    "reserved": stats["reserved_bytes.all.peak"]}
                torch.cuda.reset_peak_memory_stats()

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "loss" in logs:
                self.losses.append(float(logs["loss"]))

    return StepRecorder()


def rows_needed(args: argparse.Namespace) -> int:
    """Pairs for every optimizer step, warm-up included."""
    return (args.warmup_steps + args.steps) * args.grad_accum * args.micro_batch


def make_step_profiler(step_index: int, cuda: bool):
    """A ``TrainerCallback`` tracing one optimizer step (the first measured one) with ``torch.profiler``: how long the
    device was busy against the step's wall time, how many kernels were launched, and the operators that took the
    most device time and the most host time. A device busy for a small part of the step is waiting on the host."""
    import torch
    from transformers import TrainerCallback

    class StepProfiler(TrainerCallback):
        def __init__(self):
            self.profiler: Any = None
            self.summary: dict[str, Any] | None = None
            self.started = 0.0

        def on_step_begin(self, args, state, control, **kwargs):
            if self.profiler is None and self.summary is None and state.global_step == step_index:
                activities = [torch.profiler.ProfilerActivity.CPU]
                if cuda:
                    activities.append(torch.profiler.ProfilerActivity.CUDA)
                    torch.cuda.synchronize()
                self.profiler = torch.profiler.profile(activities=activities)
                self.profiler.__enter__()
                self.started = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            if self.profiler is None or self.summary is not None:
                return
            if cuda:
                torch.cuda.synchronize()
            wall = time.perf_counter() - self.started
            self.profiler.__exit__(None, None, None)
            self.summary = summarize_profile(self.profiler.key_averages(), wall)

    return StepProfiler()


def summarize_profile(events: Any, wall_seconds: float, top: int = 15) -> dict[str, Any]:
    """Device-busy and host-operator milliseconds of a profiled step, kernel launches, the top operators."""

    def device_us(event: Any) -> float:  # renamed from self_cuda_time_total in torch 2.4
        return float(getattr(event, "self_device_time_total", getattr(event, "self_cuda_time_total", 0.0)))

    def row(event: Any) -> dict[str, Any]:
        return {"name": event.key[:100], "calls": event.count, "self_host_ms": round(event.self_cpu_time_total / 1e3, 3),
                "self_device_ms": round(device_us(event) / 1e3, 3)}

    events = list(events)
    launches = sum(e.count for e in events if e.key in ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC"))
    return {
        "step_seconds": round(wall_seconds, 4),
        "device_busy_ms": round(sum(device_us(e) for e in events) / 1e3, 3),
        "host_operator_ms": round(sum(e.self_cpu_time_total for e in events) / 1e3, 3),
        "kernel_launches": launches,
        "operator_calls": sum(e.count for e in events if e.key.startswith("aten::")),  # nested ones counted too
        "top_by_device": [row(e) for e in sorted(events, key=device_us, reverse=True)[:top] if device_us(e) > 0],
        "top_by_host": [row(e) for e in sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[:top]],
    }


def lora_config(rank: int):
    from peft import LoraConfig

    return LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.05, target_modules="all-linear",
                      task_type="CAUSAL_LM")


def quantization_config():
    import torch
    from transformers import BitsAndBytesConfig

    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                              bnb_4bit_compute_dtype=torch.bfloat16, bnb_4bit_quant_storage=torch.uint8)


def build_trainer(trainer_name: str, mode: str, model_path: Path, args: argparse.Namespace, output_dir: str,
                  cuda: bool):
    """The trainer exactly as a user builds it: model by path, ``quantization_config`` and ``peft_config``."""
    import datasets
    import torch

    from sweet_trl.tokenization import DEFAULT_PRIVILEGED_TEMPLATE

    tokenizer = build_tokenizer(args.vocab_words)
    common = dict(
        output_dir=output_dir,
        per_device_train_batch_size=args.micro_batch,
        gradient_accumulation_steps=args.grad_accum,
        max_steps=args.warmup_steps + args.steps,
        learning_rate=args.learning_rate,
        lr_scheduler_type="constant",
        warmup_steps=0,
        max_length=args.seq_len,
        gradient_checkpointing=args.gradient_checkpointing,
        bf16=cuda,
        use_cpu=not cuda,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        dataloader_num_workers=0,
        seed=args.seed,
        model_init_kwargs={
            "dtype": torch.bfloat16,
            "device_map": {"": torch.cuda.current_device()} if cuda else {"": "cpu"},
            "attn_implementation": args.attn_implementation,
        },
        disable_tqdm=True,
    )
    # transformers renamed gradient_checkpointing_kwargs (still accepted, with a warning) to activation_...
    from transformers import TrainingArguments

    fields = {f.name for f in dataclasses.fields(TrainingArguments)}
    checkpointing_kwargs = ("activation_checkpointing_kwargs" if "activation_checkpointing_kwargs" in fields
                            else "gradient_checkpointing_kwargs")
    common[checkpointing_kwargs] = {"use_reentrant": False}
    if trainer_name == "critic":
        from sweet_trl.critic_config import SweetCriticConfig
        from sweet_trl.critic_trainer import SweetCriticTrainer

        config = SweetCriticConfig(**common)
        rows = critic_pairs(tokenizer, rows_needed(args), args.seq_len, args.seed, DEFAULT_PRIVILEGED_TEMPLATE)
        trainer_class = SweetCriticTrainer
    else:
        from sweet_trl.policy_config import TurnPreferenceConfig
        from sweet_trl.policy_trainer import TurnPreferenceTrainer

        config = TurnPreferenceConfig(**common)
        rows = policy_pairs(tokenizer, rows_needed(args), args.seq_len, args.seed)
        trainer_class = TurnPreferenceTrainer
    dataset = datasets.Dataset.from_list(rows)
    trainer = trainer_class(
        str(model_path),
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=lora_config(args.lora_rank),
        quantization_config=quantization_config() if mode == "qlora" else None,
    )
    return trainer


def run_one(trainer_name: str, mode: str, model_path: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Train one (trainer, mode) for ``warmup_steps + steps`` optimizer steps and measure it."""
    import torch

    cuda = torch.cuda.is_available()
    result: dict[str, Any] = {"trainer": trainer_name, "mode": mode, "seq_len": args.seq_len,
                              "micro_batch": args.micro_batch, "gradient_checkpointing": args.gradient_checkpointing,
                              "grad_accum": args.grad_accum, "warmup_steps": args.warmup_steps,
                              "steps": args.steps, "lora_rank": args.lora_rank, "status": "ok"}
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gpu_train_") as output_dir:
        trainer = build_trainer(trainer_name, mode, model_path, args, output_dir, cuda)
        result["setup_seconds"] = round(time.perf_counter() - start, 1)
        if cuda:
            torch.cuda.synchronize()
            result["model_allocated_gib"] = round(torch.cuda.memory_allocated() / GIB, 3)
        if len(trainer.train_dataset) != rows_needed(args):  # the synthetic pairs are sized to fit max_length
            raise RuntimeError(f"the trainer kept {len(trainer.train_dataset)} of {rows_needed(args)} synthetic pairs")
        result["trainable_parameters"] = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
        result["quantized_4bit"] = bool(getattr(trainer.model, "is_loaded_in_4bit", False)
                                        or getattr(getattr(trainer.model, "base_model", None), "is_loaded_in_4bit",
                                                   False))
        counter = TokenCounter(trainer)
        recorder = make_step_recorder(counter, args.warmup_steps, cuda)
        trainer.add_callback(recorder)
        profiler = make_step_profiler(args.warmup_steps, cuda) if args.profile else None
        if profiler is not None:
            trainer.add_callback(profiler)
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        trainer.train()
    if profiler is not None:
        result["profile"] = profiler.summary
    measured = recorder.steps[args.warmup_steps:]
    if not measured:
        raise RuntimeError(f"training ran {len(recorder.steps)} steps; none after {args.warmup_steps} warm-up steps")
    seconds = sum(s["seconds"] for s in measured)
    tokens = sum(s["tokens"] for s in measured)
    result.update({
        "step_seconds": [round(s["seconds"], 3) for s in recorder.steps],
        "tokens_per_step": round(tokens / len(measured)),
        "seconds_per_step": round(seconds / len(measured), 3),
        "tokens_per_second": round(tokens / seconds, 1),
        "losses": recorder.losses,
        "loss_finite": bool(recorder.losses) and all(math.isfinite(x) for x in recorder.losses),
    })
    if cuda:
        # peak over the whole run (the first step allocates the optimizer state) and over the measured steps
        stats = torch.cuda.memory_stats()
        steady = {"allocated": stats["allocated_bytes.all.peak"], "reserved": stats["reserved_bytes.all.peak"]}
        peak = {key: max(steady[key], recorder.warmup_peak[key]) for key in steady}
        free, total = torch.cuda.mem_get_info()
        context = total - free - torch.cuda.memory_reserved()
        result.update({
            "peak_allocated_gib": round(peak["allocated"] / GIB, 3),
            "peak_reserved_gib": round(peak["reserved"] / GIB, 3),
            "steady_peak_allocated_gib": round(steady["allocated"] / GIB, 3),
            "steady_peak_reserved_gib": round(steady["reserved"] / GIB, 3),
            "driver_and_context_gib": round(context / GIB, 3),
            f"fits_{TARGET_GPU_GB}gb": peak["reserved"] + context <= TARGET_GPU_GB * 1e9,
        })
    result["peak_rss_gib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB, 3)
    return result


# ---------------------------------------------------------------------------------------------------------------
# Orchestration: one process per (trainer, mode), a table and a JSON file

def environment(init_cuda: bool) -> dict[str, Any]:
    """Versions and device. Without ``init_cuda`` the GPU is named by nvidia-smi, leaving CUDA uninitialised."""
    from importlib import metadata

    import torch

    versions = {"python": platform.python_version()}
    for name in ("torch", "transformers", "trl", "peft", "accelerate", "bitsandbytes", "datasets"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    info: dict[str, Any] = {"versions": versions, "cuda": torch.version.cuda,
                            "device": f"CPU ({platform.machine()}, {os.cpu_count()} cores)"}
    if init_cuda and torch.cuda.is_available():
        info["device"] = torch.cuda.get_device_name(0)
        info["gpu_memory_gib"] = round(torch.cuda.get_device_properties(0).total_memory / GIB, 1)
    elif torch.cuda.is_available():
        try:
            info["device"] = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                                            check=False, capture_output=True, text=True, timeout=30).stdout.strip() or "CUDA GPU"
        except (OSError, subprocess.SubprocessError):
            info["device"] = "CUDA GPU"
    return info


def child_command(args: argparse.Namespace, trainer_name: str, mode: str, model_path: Path, result_file: Path):
    return [sys.executable, str(Path(__file__).resolve()), "--child", "--trainer", trainer_name, "--mode", mode,
            "--size", args.size, "--seq-len", str(args.seq_len), "--steps", str(args.steps),
            "--warmup-steps", str(args.warmup_steps), "--grad-accum", str(args.grad_accum),
            "--micro-batch", str(args.micro_batch),
            "--gradient-checkpointing" if args.gradient_checkpointing else "--no-gradient-checkpointing",
            *(["--profile"] if args.profile else []),
            "--lora-rank", str(args.lora_rank), "--learning-rate", str(args.learning_rate),
            "--vocab-words", str(args.vocab_words), "--attn-implementation", args.attn_implementation,
            "--seed", str(args.seed), "--model-path", str(model_path), "--result-file", str(result_file)]


def classify_failure(text: str) -> str:
    return "oom" if "out of memory" in text.lower() or "OutOfMemoryError" in text else "failed"


def format_table(results: list[dict[str, Any]]) -> str:
    header = ("trainer", "mode", "seq", "accum", "tok/step", "s/step", "tok/s", "peak alloc GiB",
              "peak reserved GiB", f"fits {TARGET_GPU_GB} GB", "peak RSS GiB", "loss", "status")
    rows = []
    for r in results:
        loss = f"{r['losses'][-1]:.4f}" if r.get("losses") else "-"
        rows.append((r["trainer"], r["mode"], str(r.get("seq_len", "-")), str(r.get("grad_accum", "-")),
                     str(r.get("tokens_per_step", "-")), str(r.get("seconds_per_step", "-")),
                     str(r.get("tokens_per_second", "-")), str(r.get("peak_allocated_gib", "-")),
                     str(r.get("peak_reserved_gib", "-")), str(r.get(f"fits_{TARGET_GPU_GB}gb", "-")),
                     str(r.get("peak_rss_gib", "-")), loss, r["status"]))
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(header)]

    def line(cells) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    return "\n".join([line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)])


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", choices=sorted(SIZES), default=None,
                        help="model size: 8b (Llama-3.1-8B shape; needs a GPU) or tiny (CPU in seconds); "
                             "default 8b with a GPU, tiny without")
    parser.add_argument("--trainer", choices=[*TRAINERS, "both"], default="both")
    parser.add_argument("--mode", choices=[*MODES, "both"], default="both")
    parser.add_argument("--seq-len", type=int, default=None, help="tokens per sequence (default 4096; tiny: 256)")
    parser.add_argument("--steps", type=int, default=3, help="measured optimizer steps after warm-up")
    parser.add_argument("--warmup-steps", type=int, default=1, help="optimizer steps not measured")
    parser.add_argument("--grad-accum", type=int, default=4, help="micro-batches per optimizer step")
    parser.add_argument("--micro-batch", type=int, default=1, help="pairs per micro-batch (one forward)")
    parser.add_argument("--gradient-checkpointing", action=argparse.BooleanOptionalAction, default=True,
                        help="recompute activations in the backward pass (default on: the 8B fits 24 GB so)")
    parser.add_argument("--profile", action="store_true",
                        help="trace the first measured step with torch.profiler: device-busy time against the "
                             "step's, kernel launches, top operators by device and by host time (in the JSON)")
    parser.add_argument("--lora-rank", type=int, default=16)
    parser.add_argument("--learning-rate", type=float, default=1e-5)
    parser.add_argument("--vocab-words", type=int, default=None,
                        help="words of the synthetic tokenizer (default: the model's vocabulary size minus 16)")
    parser.add_argument("--attn-implementation", default="sdpa")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache-dir", type=Path,
                        default=Path(os.environ.get("GPU_TRAIN_CACHE", Path(tempfile.gettempdir()) / "gpu_train")),
                        help="where the random model is written once and reused (16 GB for 8b)")
    parser.add_argument("--json", type=Path, default=None,
                        help="write the results here (default: $OUT/gpu_train.json when OUT is set)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds allowed for each (trainer, mode) run")
    parser.add_argument("--in-process", action="store_true",
                        help="run every (trainer, mode) in this process (faster start; GPU peaks may then include "
                             "memory the previous run left cached)")
    parser.add_argument("--deadline", type=float, default=None,
                        help="seconds for the whole benchmark: runs that cannot start in time are marked skipped")
    # internal: one (trainer, mode) in this process
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--build-model", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--model-path", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--result-file", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.size is None:
        import torch

        args.size = "8b" if torch.cuda.is_available() else "tiny"
    if args.seq_len is None:
        args.seq_len = DEFAULT_SEQ_LEN[args.size]
    if args.vocab_words is None:
        args.vocab_words = SIZES[args.size]["vocab_size"] - 16
    if args.vocab_words + 16 > SIZES[args.size]["vocab_size"]:
        parser.error(f"--vocab-words must leave 16 ids for special tokens in a vocabulary of "
                     f"{SIZES[args.size]['vocab_size']}")
    for name in ("steps", "grad_accum", "micro_batch", "lora_rank", "seq_len"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.seq_len < MIN_SEQ_LEN:
        parser.error(f"--seq-len must be at least {MIN_SEQ_LEN} (ten-turn dialogues with their chat template)")
    if args.warmup_steps < 0:
        parser.error("--warmup-steps must be >= 0")
    return args


def run_guarded(trainer_name: str, mode: str, model_path: Path, args: argparse.Namespace) -> dict[str, Any]:
    """:func:`run_one`, with a failure (out of memory included) returned as a result rather than raised."""
    try:
        return run_one(trainer_name, mode, model_path, args)
    except Exception as err:  # noqa: BLE001 - a failed run is data for the table, not a crash of the batch
        text = "".join(traceback.format_exception(err))
        print(text, file=sys.stderr)
        return {"trainer": trainer_name, "mode": mode, "seq_len": args.seq_len, "status": classify_failure(text),
                "error": f"{type(err).__name__}: {err}"[:2000]}
    finally:
        gc.collect()
        if "torch" in sys.modules and sys.modules["torch"].cuda.is_available():
            sys.modules["torch"].cuda.empty_cache()


def run_isolated(trainer_name: str, mode: str, model_path: Path, args: argparse.Namespace, result_file: Path,
                 timeout: float) -> dict[str, Any]:
    """One (trainer, mode) in a fresh Python process, so its peak GPU memory is its own."""
    try:
        subprocess.run(child_command(args, trainer_name, mode, model_path, result_file), check=False,
                       timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"trainer": trainer_name, "mode": mode, "status": "timeout", "error": f"stopped after {timeout:.0f} s"}
    if not result_file.exists():
        return {"trainer": trainer_name, "mode": mode, "status": "failed",
                "error": "the run exited without a result (killed by the system?)"}
    return json.loads(result_file.read_text())


def child_main(args: argparse.Namespace) -> int:
    """One (trainer, mode): writes its result (or its failure) to ``--result-file``."""
    result = run_guarded(args.trainer, args.mode, args.model_path, args)
    args.result_file.write_text(json.dumps(result))
    return 0 if result["status"] == "ok" else 1


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        return child_main(args)
    if args.build_model:
        info = build_random_model(args.size, args.model_path, args.vocab_words)
        args.result_file.write_text(json.dumps(info))
        return 0

    import torch

    if args.size == "8b" and not torch.cuda.is_available():
        print("--size 8b needs a CUDA GPU (it trains an 8B model); use --size tiny on CPU", file=sys.stderr)
        return 2
    command = "python benchmarks/gpu_train.py " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    # environment() initialises CUDA: done after the runs, so this process holds no GPU memory while they train
    report: dict[str, Any] = {"benchmark": "gpu_train", "command": command, "size": args.size,
                              "model": dict(SIZES[args.size]), "isolated": not args.in_process,
                              "pytorch_cuda_alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
                              **environment(init_cuda=False), "results": []}
    args.cache_dir.mkdir(parents=True, exist_ok=True)
    model_path = model_dir_for(args.size, args.cache_dir)
    json_path = args.json or (Path(os.environ["OUT"]) / "gpu_train.json" if os.environ.get("OUT") else None)

    def save() -> None:  # after every run, so a command stopped at its time limit still leaves its results
        if json_path is not None:
            json_path.parent.mkdir(parents=True, exist_ok=True)
            json_path.write_text(json.dumps(report, indent=2))

    deadline = time.monotonic() + args.deadline if args.deadline else None
    with tempfile.TemporaryDirectory(prefix="gpu_train_results_") as scratch:
        scratch = Path(scratch)
        if not (model_path / "config.json").exists():
            needed = 2 * model_parameters(args.size) + GIB  # bf16 weights and the tokenizer, with room to spare
            free = shutil.disk_usage(args.cache_dir).free
            if free < needed:
                print(f"--cache-dir {args.cache_dir} has {free / GIB:.1f} GiB free; the random {args.size} model "
                      f"needs {needed / GIB:.1f} GiB", file=sys.stderr)
                return 1
            print(f"writing the random {args.size} model to {model_path} ...", flush=True)
            if args.in_process:
                report["model_build"] = build_random_model(args.size, model_path, args.vocab_words)
            else:
                build = child_command(args, "critic", "qlora", model_path, scratch / "build.json")
                build[build.index("--child")] = "--build-model"
                if subprocess.run(build, check=False).returncode != 0 or not (scratch / "build.json").exists():
                    report["model_build"] = {"status": "failed", "path": str(model_path)}
                    save()
                    print("could not write the random model (see the error above)", file=sys.stderr)
                    return 1
                report["model_build"] = json.loads((scratch / "build.json").read_text())
            print(f"  done in {report['model_build']['seconds']} s", flush=True)
            save()
        trainers = TRAINERS if args.trainer == "both" else (args.trainer,)
        modes = MODES if args.mode == "both" else (args.mode,)
        for mode in modes:  # QLoRA first: the paper-scale target, measured even if time runs out later
            for trainer_name in trainers:
                result_file = scratch / f"{trainer_name}-{mode}.json"
                timeout = args.timeout
                if deadline is not None:
                    timeout = min(timeout, deadline - time.monotonic())
                    if timeout < 30:
                        report["results"].append({"trainer": trainer_name, "mode": mode, "status": "skipped",
                                                  "error": f"--deadline {args.deadline} s reached"})
                        continue
                print(f"== {trainer_name} / {mode}", flush=True)
                start = time.perf_counter()
                if args.in_process:
                    result = run_guarded(trainer_name, mode, model_path, args)
                else:
                    result = run_isolated(trainer_name, mode, model_path, args, result_file, timeout)
                result["wall_seconds"] = round(time.perf_counter() - start, 1)
                report["results"].append(result)
                save()
                print(json.dumps({k: v for k, v in result.items() if k not in ("step_seconds",)}), flush=True)
    report.update(environment(init_cuda=True))
    print()
    print(f"{report['device']}; {args.size} model; torch {report['versions']['torch']}, "
          f"transformers {report['versions']['transformers']}, trl {report['versions']['trl']}, "
          f"peft {report['versions']['peft']}, bitsandbytes {report['versions']['bitsandbytes']}")
    print(format_table(report["results"]))
    if json_path is not None:
        save()
        print(f"wrote {json_path}")
    print("GPU_TRAIN_JSON " + json.dumps(report))
    return 0 if all(r["status"] == "ok" for r in report["results"]) else 1


if __name__ == "__main__":
    sys.exit(main())
