"""Tiny models, tokenizers and synthetic dialogues for fast CPU tests (nothing is fetched from the Hub).

- ``tiny_tokenizer()``: a byte-level BPE trained with ``tokenizers`` on a small corpus in a few milliseconds,
  wrapped as a ``PreTrainedTokenizerFast`` with a chat template whose assistant spans are marked with
  ``{% generation %}`` tags (so ``apply_chat_template(..., return_assistant_tokens_mask=True)`` works).
- ``tiny_causal_lm(tokenizer)``: a randomly initialised two-layer Llama sized to the tokenizer.
- ``save_tiny_model(path)``: both saved to a folder, for code that loads models by name or path.
- ``collaborative_trajectories(...)``: synthetic ColBench-style trajectory records whose reward is decided by one
  agent turn (whether the agent asked about the detail hidden in the task's ground truth).

Usage::

    from helpers_tiny_models import tiny_tokenizer, tiny_causal_lm
    tokenizer = tiny_tokenizer()
    model = tiny_causal_lm(tokenizer)
"""

from __future__ import annotations

import functools
import random
from collections.abc import Iterable
from pathlib import Path
from typing import Any

BOS, EOS, PAD = "<|bos|>", "<|eot|>", "<|pad|>"
ROLE_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>")

# Assistant content and its end-of-turn token sit inside {% generation %}: the span a policy generates.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}"
    "<|assistant|>\n{% generation %}{{ message['content'] }}<|eot|>{% endgeneration %}{{ '\\n' }}"
    "{% else %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}<|eot|>\n"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

BASE_CORPUS = (
    "Write a Python function that returns the sum of a list of numbers.",
    "What should the function return when the list is empty?",
    "Could you tell me more about the expected input format?",
    "I WANT TO ANSWER: def solve(values):\n    return sum(values)",
    "def convert(value, unit='celsius'):\n    if unit == 'kelvin':\n        return value + 273.15\n    return value",
    "The page should have a blue header, a navigation bar and a footer with contact links.",
    "<html><head><title>Shop</title></head><body><h1>Welcome</h1><p>Our products</p></body></html>",
    "Reference solution (hidden from the agent): the answer uses the metric system.",
    "Yes, that is right. No, please use another one. I am not sure, do what you think is best.",
    "Thanks! Sounds good. Any edge cases? Should the name be different? Which library should I use?",
)


@functools.lru_cache(maxsize=8)
def _train_tokenizer(corpus: tuple[str, ...], vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[PAD, BOS, EOS, *ROLE_TOKENS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(list(corpus), trainer=trainer)
    return backend.to_str()


def tiny_tokenizer(extra_corpus: Iterable[str] = (), vocab_size: int = 512):
    """A fresh byte-level BPE tokenizer with a chat template; words frequent in ``extra_corpus`` become tokens.

    Training is cached per corpus, so calling this in every test costs microseconds after the first call.
    """
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    serialized = _train_tokenizer(tuple(BASE_CORPUS) + tuple(extra_corpus), vocab_size)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(serialized),
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def tiny_causal_lm(tokenizer, hidden_size: int = 64, num_layers: int = 2, num_heads: int = 4, seed: int = 0):
    """A randomly initialised Llama whose vocabulary matches ``tokenizer`` (float32, eval-ready, about 100k weights)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_heads,
        max_position_embeddings=1024,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(config).float()


def save_tiny_model(path: str | Path, extra_corpus: Iterable[str] = (), **model_kwargs: Any) -> str:
    """Save a tiny tokenizer and model to ``path`` and return it as a string (loadable with ``from_pretrained``)."""
    tokenizer = tiny_tokenizer(extra_corpus)
    model = tiny_causal_lm(tokenizer, **model_kwargs)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


# ---------------------------------------------------------------------------------------------------------------
# Synthetic collaborative trajectories: the reward is decided by one agent turn.

FAILURES = ("wrong_detail", "no_question", "assume", "answer_early")
# What a failed trajectory says at its decisive turn with failure="assume": one message, the same in every pool
ASSUMPTION = "Let me assume the usual unit."
DETAILS = ("celsius", "kelvin", "meters", "inches", "grams", "pounds", "seconds", "hours")
FILLERS = (
    "What should the function be called?",
    "Are there any edge cases to handle?",
    "Should the input be a list?",
    "Do you want comments in the code?",
    "Is performance important here?",
    "Should invalid input raise an error?",
)
ANSWERS = (
    "I WANT TO ANSWER: def solve(value):\n    return convert(value)",
    "I WANT TO ANSWER: def solve(values):\n    return [convert(v) for v in values]",
    "I WANT TO ANSWER: def solve(value):\n    return round(convert(value), 2)",
)


def decisive_question(detail: str) -> str:
    return f"Should the result be in {detail}?"


def synthetic_corpus() -> list[str]:
    """Text that makes every detail word and every template phrase a handful of tokens in ``tiny_tokenizer``."""
    lines = [decisive_question(d) for d in DETAILS] * 4
    lines += [f"def convert(value):\n    # the result is in {d}\n    return to_{d}(value)" for d in DETAILS] * 4
    return lines + list(FILLERS) * 4 + list(ANSWERS) * 4 + ["Okay, noted.", "Write a unit converter."] * 4


def collaborative_trajectories(
    num_tasks: int,
    per_task: int = 2,
    num_agent_turns: int = 3,
    seed: int = 0,
    task_prefix: str = "task",
    shared_context: bool = True,
    details: tuple[str, ...] = DETAILS,
    failure: str = "wrong_detail",
    fillers: tuple[str, ...] = FILLERS,
    answers: tuple[str, ...] = ANSWERS,
    descriptions: tuple[str, ...] | None = None,
    names: tuple[str, ...] | None = None,
) -> list[dict[str, Any]]:
    """ColBench-style trajectory records where only one agent turn decides the reward.

    Each task hides one detail (a unit from ``details``) in its ground truth. In every trajectory one agent turn,
    at a random position, is decisive: successful trajectories (reward 1.0) ask ``decisive_question(detail)``.
    Failed ones (reward 0.0), by ``failure``:

    - ``"wrong_detail"``: ask about another unit (recognisable only by comparing the turn with the ground truth);
    - ``"no_question"``: ask an unrelated filler (visible without it);
    - ``"assume"``: say :data:`ASSUMPTION`, the same message in every task and pool;
    - ``"answer_early"``: give the final answer at the decisive turn, which ends the dialogue (the answer's text is
      one successful trajectories give too, at their end).

    The other turns are fillers, the human always answers "Okay, noted.", and the final turn is an answer that does
    not depend on the reward. Trajectories alternate success and failure per task. With ``shared_context=True`` the
    trajectories of a task share fillers, their order, the decisive position and the answer. Each record carries
    ``decisive_turn`` (0-based agent turn index) for evaluating credit assignment.

    ``fillers``, ``answers``, ``descriptions`` (the task's opening request; default "Write a unit converter.") and
    ``names`` (the function name in the ground truth; default ``convert``) are the pools the dialogues and ``c`` are
    drawn from: disjoint pools give held-out sets that share no context, filler or privileged text with training.
    With the defaults the records are the same as before these pools existed.
    """
    if failure not in FAILURES:
        raise ValueError(f"unknown failure kind {failure!r}")
    rng = random.Random(seed)
    records = []
    for task_index in range(num_tasks):
        detail = rng.choice(details)
        description = rng.choice(descriptions) if descriptions else "Write a unit converter."
        name = rng.choice(names) if names else "convert"
        task = {
            "task_id": f"{task_prefix}-{task_index}",
            "problem_description": description,
            "ground_truth": f"def {name}(value):\n    # the result is in {detail}\n    return to_{detail}(value)",
        }
        for k in range(per_task):
            success = k % 2 == 0
            context_rng = random.Random(f"{seed}/{task_index}") if shared_context else rng
            decisive = context_rng.randrange(num_agent_turns - 1)  # the last turn is always the answer
            chosen_fillers = context_rng.sample(fillers, num_agent_turns - 1)
            # drawn here only where the dialogue needs it early, so that other kinds draw in their former order
            answer = context_rng.choice(answers) if failure == "answer_early" else None
            if success:
                decisive_message = decisive_question(detail)
            elif failure == "wrong_detail":
                decisive_message = decisive_question(rng.choice([d for d in details if d != detail]))
            elif failure == "no_question":
                decisive_message = chosen_fillers[-1]
            elif failure == "assume":
                decisive_message = ASSUMPTION
            else:  # "answer_early"
                decisive_message = answer
            dialogue = [{"role": "user", "content": task["problem_description"]}]
            for turn in range(num_agent_turns - 1):
                question = decisive_message if turn == decisive else chosen_fillers[turn]
                dialogue.append({"role": "assistant", "content": question})
                if question == answer:
                    break
                dialogue.append({"role": "user", "content": "Okay, noted."})
            else:
                answer = answer if answer is not None else context_rng.choice(answers)
                dialogue.append({"role": "assistant", "content": answer})
            records.append({
                "task": task,
                "dialogue_history": dialogue,
                "answer": dialogue[-1]["content"].split("I WANT TO ANSWER:", 1)[1].strip(),
                "reward": 1.0 if success else 0.0,
                "success": success,
                "task_id": task["task_id"],
                "episode_id": f"{task['task_id']}/{k}",
                "env_id": "ColBench-Backend-v0",
                "decisive_turn": decisive,
            })
    return records
