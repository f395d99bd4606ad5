"""A tiny Qwen-style model and tokenizer that TRL recognises for tool calling, built in the test (no Hub).

- ``qwen_tokenizer(corpus)``: a byte-level BPE trained on ``corpus`` in milliseconds, with Qwen's special tokens
  (``<|im_start|>``, ``<|im_end|>``, ``<|endoftext|>``), its tool tags as added tokens, and TRL's copy of the
  Qwen2.5 chat template, so ``GRPOTrainer`` sets its tool-call parser (``add_response_schema``) by itself.
- ``tiny_qwen(tokenizer)``: a randomly initialised two-layer Qwen2 sized to the tokenizer.
- ``tool_suffix_ids`` / ``human_suffix_ids``: the tokens TRL (tool results) and the rollout door (human turns) put
  between two policy turns.
- ``overfit(model, sequences)``: teach the model a few token sequences (loss on the policy tokens only), so that a
  real ``generate`` reproduces scripted dialogues: tool calls that parse, answers that the grader scores.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from typing import Any

SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
TOOL_TAGS = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<tools>", "</tools>")


@functools.lru_cache(maxsize=8)
def _train(corpus: tuple[str, ...], vocab_size: int) -> str:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    backend.train_from_iterator(list(corpus), trainer=trainer)
    return backend.to_str()


def qwen_tokenizer(corpus: Iterable[str] = (), vocab_size: int = 2048):
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast
    from trl.chat_template_utils import qwen2_5_chat_template

    template_text = qwen2_5_chat_template.replace("{{-", " ").replace("}}", " ")
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(_train((template_text, *corpus), vocab_size)),
        eos_token="<|im_end|>", pad_token="<|endoftext|>", clean_up_tokenization_spaces=False,
    )
    tokenizer.add_tokens(list(TOOL_TAGS))
    tokenizer.chat_template = qwen2_5_chat_template
    tokenizer.padding_side = "left"
    return tokenizer


def tiny_qwen(tokenizer, hidden_size: int = 96, num_layers: int = 2, num_heads: int = 4, seed: int = 0):
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=hidden_size * 2,
                         num_hidden_layers=num_layers, num_attention_heads=num_heads, num_key_value_heads=num_heads,
                         max_position_embeddings=4096, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, bos_token_id=None, tie_word_embeddings=True)
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config).float()
    model.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id,
                                               pad_token_id=tokenizer.pad_token_id)
    return model


def render_ids(tokenizer, messages: list[dict[str, Any]], generation_prompt: bool, **kwargs: Any) -> list[int]:
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=generation_prompt, tokenize=True,
                                        return_dict=False, **kwargs)
    return [int(t) for t in ids]


def _trim_to_eos(tokenizer, ids: list[int]) -> list[int]:
    ends = [i for i, t in enumerate(ids) if t == tokenizer.eos_token_id]
    return ids[: ends[-1] + 1]


def tool_suffix_ids(tokenizer, name: str, content: str, chat_template: str | None = None) -> list[int]:
    """The tokens TRL inserts after a tool call: the tool's result and the next assistant header."""
    calls = [{"type": "function", "function": {"name": name, "arguments": {}}}]
    dummy = [{"role": "user", "content": "dummy"}, {"role": "assistant", "content": "", "tool_calls": calls}]
    prefix = _trim_to_eos(tokenizer, render_ids(tokenizer, dummy, False, chat_template=chat_template))
    full = render_ids(tokenizer, [*dummy, {"role": "tool", "name": name, "content": content}], True,
                      chat_template=chat_template)
    assert full[: len(prefix)] == prefix
    return full[len(prefix):]


def human_suffix_ids(tokenizer, reply: str) -> list[int]:
    """The tokens the rollout door inserts after a policy turn: the human's message and the next header."""
    dummy = [{"role": "user", "content": "dummy"}, {"role": "assistant", "content": "dummy"}]
    prefix = _trim_to_eos(tokenizer, render_ids(tokenizer, dummy, False))
    full = render_ids(tokenizer, [*dummy, {"role": "user", "content": reply}], True)
    assert full[: len(prefix)] == prefix
    return full[len(prefix):]


def overfit(model, sequences: Sequence[tuple[list[int], list[int]]], steps: int = 300, lr: float = 3e-3,
            target_loss: float = 0.002) -> float:
    """Train on ``(ids, loss_mask)`` pairs until the masked loss is below ``target_loss``; returns the last loss."""
    import torch

    width = max(len(ids) for ids, _ in sequences)
    pad = model.config.pad_token_id
    input_ids = torch.full((len(sequences), width), pad, dtype=torch.long)
    labels = torch.full((len(sequences), width), -100, dtype=torch.long)
    attention = torch.zeros((len(sequences), width), dtype=torch.long)
    for b, (ids, mask) in enumerate(sequences):
        input_ids[b, : len(ids)] = torch.tensor(ids)
        attention[b, : len(ids)] = 1
        labels[b, : len(ids)] = torch.tensor([t if m else -100 for t, m in zip(ids, mask)])
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    loss = float("inf")
    for _ in range(steps):
        optimizer.zero_grad()
        out = model(input_ids=input_ids, attention_mask=attention, labels=labels)
        out.loss.backward()
        optimizer.step()
        loss = float(out.loss.detach())
        if loss < target_loss:
            break
    model.eval()
    return loss
