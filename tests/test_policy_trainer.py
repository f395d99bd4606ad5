"""The SWEET-RL turn-level preference trainer: configuration, loss, learning, LoRA and QLoRA on CPU."""

from __future__ import annotations

import logging
import math
import random
import statistics

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

from helpers_learning import HELD_OUT_POOL, assert_held_out, learning_corpus, spread
from helpers_tiny_models import (
    DETAILS,
    FILLERS,
    decisive_question,
    save_tiny_model,
    synthetic_corpus,
    tiny_causal_lm,
    tiny_tokenizer,
)

from sweet_trl.policy_config import TurnPreferenceConfig
from sweet_trl.policy_trainer import (
    TurnPreferenceTrainer,
    check_turn_pairs,
    message_logprobs,
    preference_margins,
    train_turn_preference,
)

SYSTEM = "You are a software engineer working with a human who wants a Python function."


def turn_pairs(units, seed: int, count: int, pool: dict | None = None) -> list[dict]:
    """Pairs where asking about a unit is preferred over a filler question, at the first or a later turn.

    ``pool``: the requests and fillers to draw from; by default "Write a unit converter." and ``FILLERS`` (the
    fillers of ``helpers_learning.TRAIN_POOL``); ``HELD_OUT_POOL`` gives pairs whose prompts and rejected questions
    never occur in training."""
    rng = random.Random(seed)
    fillers = pool["fillers"] if pool else FILLERS
    rows = []
    for _ in range(count):
        request = rng.choice(pool["descriptions"]) if pool else "Write a unit converter."
        prompt = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": request}]
        if rng.random() < 0.5:
            prompt += [{"role": "assistant", "content": rng.choice(fillers)},
                       {"role": "user", "content": "Okay, noted."}]
        rows.append({
            "prompt": prompt,
            "chosen": [{"role": "assistant", "content": decisive_question(rng.choice(units))}],
            "rejected": [{"role": "assistant", "content": rng.choice(fillers)}],
        })
    return rows


def fast_config(tmp_path, **overrides) -> TurnPreferenceConfig:
    values = dict(output_dir=str(tmp_path / "policy"), learning_rate=1e-3, per_device_train_batch_size=8,
                  gradient_accumulation_steps=1, num_train_epochs=3, bf16=False, gradient_checkpointing=False,
                  report_to="none", logging_steps=1, save_strategy="no", use_cpu=True, max_length=256,
                  disable_tqdm=True)
    values.update(overrides)
    return TurnPreferenceConfig(**values)


def test_config_is_the_released_recipe_with_an_nll_term(tmp_path):
    config = TurnPreferenceConfig(output_dir=str(tmp_path), bf16=False, use_cpu=True)
    assert (config.beta, config.nll_coef, config.learning_rate) == (0.1, 0.01, 2e-7)
    assert config.loss_type == ["sigmoid", "sft"] and config.loss_weights == [1.0, 0.01]
    assert config.max_length == 16384 and config.num_train_epochs == 1
    assert config.per_device_train_batch_size * config.gradient_accumulation_steps == 8

    cpu = dict(bf16=False, use_cpu=True)
    plain = TurnPreferenceConfig(output_dir=str(tmp_path), nll_coef=0.0, **cpu)
    assert plain.loss_type == ["sigmoid"] and plain.loss_weights is None
    # What a saved and reloaded configuration looks like: "sft" listed with the matching weight.
    again = TurnPreferenceConfig(output_dir=str(tmp_path), loss_type=["sigmoid", "sft"], loss_weights=[1.0, 0.01],
                                 **cpu)
    assert again.loss_type == ["sigmoid", "sft"] and again.loss_weights == [1.0, 0.01]
    with pytest.raises(ValueError, match="nll_coef"):
        TurnPreferenceConfig(output_dir=str(tmp_path), loss_type=["sigmoid", "sft"], loss_weights=[1.0, 0.5], **cpu)
    with pytest.raises(ValueError, match="nll_coef"):
        TurnPreferenceConfig(output_dir=str(tmp_path), nll_coef=-1.0, **cpu)


def test_malformed_pairs_fail_with_their_row():
    good = turn_pairs(DETAILS, 0, 2)
    check_turn_pairs(good)
    two_messages = [dict(good[0]), {**good[1], "chosen": good[1]["chosen"] * 2}]
    with pytest.raises(ValueError, match="pair 1: 'chosen' must be exactly one assistant message"):
        check_turn_pairs(two_messages)
    ends_with_agent = [{**good[0], "prompt": good[0]["prompt"] + [{"role": "assistant", "content": "x"}]}]
    with pytest.raises(ValueError, match="pair 0: 'prompt' must be chat messages ending with a user message"):
        check_turn_pairs(ends_with_agent)
    with pytest.raises(ValueError, match="lack the column"):
        check_turn_pairs([{"prompt": good[0]["prompt"], "chosen": good[0]["chosen"]}])


def test_an_empty_dataset_is_an_error_before_trl_sees_it(tmp_path):
    from datasets import Dataset, IterableDataset

    tokenizer = tiny_tokenizer(synthetic_corpus())
    empty_columns = Dataset.from_dict({"prompt": [], "chosen": [], "rejected": []})
    nothing = IterableDataset.from_generator(lambda: iter([]))
    for empty in ([], empty_columns, nothing):
        with pytest.raises(ValueError, match="no train turn pairs: the dataset is empty"):
            TurnPreferenceTrainer(tiny_causal_lm(tokenizer), args=fast_config(tmp_path), train_dataset=empty,
                                  processing_class=tokenizer)
    with pytest.raises(ValueError, match="no eval turn pairs: the dataset is empty"):
        TurnPreferenceTrainer(tiny_causal_lm(tokenizer), args=fast_config(tmp_path),
                              train_dataset=turn_pairs(DETAILS, 0, 2), eval_dataset=empty_columns,
                              processing_class=tokenizer)


def prompt_tokens(tokenizer, prompt) -> int:
    return len(tokenizer.apply_chat_template(prompt, add_generation_prompt=True, return_dict=True)["input_ids"])


def test_pairs_whose_prompt_fills_max_length_are_dropped_counted_and_logged(tmp_path, caplog):
    """A prompt of max_length tokens leaves no message token to train on: dropped and counted; a pair that fits
    only in part is kept and counted as truncated; a dataset with no pair left is an error that says why."""
    tokenizer = tiny_tokenizer(synthetic_corpus())
    fits, near, long = turn_pairs(DETAILS, 0, 3)
    near["prompt"] = near["prompt"][:1] + [{"role": "user", "content": "Write a converter. " + "word " * 40}]
    long["prompt"] = long["prompt"][:1] + [{"role": "user", "content": "Write a converter. " + "word " * 90}]
    near["chosen"] = [{"role": "assistant", "content": "Which unit? " * 20}]
    max_length = prompt_tokens(tokenizer, near["prompt"]) + 4
    assert prompt_tokens(tokenizer, long["prompt"]) >= max_length > prompt_tokens(tokenizer, fits["prompt"]) + 30
    with caplog.at_level(logging.WARNING, logger="sweet_trl.policy_trainer"):
        trainer = TurnPreferenceTrainer(tiny_causal_lm(tokenizer), args=fast_config(tmp_path, max_length=max_length),
                                        train_dataset=[fits, near, long], eval_dataset=[long, fits],
                                        processing_class=tokenizer)
    assert trainer.data_report["train"] == {"pairs": 3, "kept": 2, "dropped": {"prompt_too_long": 1},
                                            "truncated": 1}
    assert trainer.data_report["eval"] == {"pairs": 2, "kept": 1, "dropped": {"prompt_too_long": 1},
                                           "truncated": 0}
    assert len(trainer.train_dataset) == 2
    assert f"train: dropped 1 of 3 turn pairs whose prompt alone fills max_length={max_length}" in caplog.text
    assert "train: 1 turn pairs are longer than max_length" in caplog.text
    with pytest.raises(ValueError, match=r"no usable turn pair in the train dataset: .*max_length=\d+.*"
                                         r"'prompt_too_long': 2"):
        TurnPreferenceTrainer(tiny_causal_lm(tokenizer), args=fast_config(tmp_path, max_length=max_length),
                              train_dataset=[long, long], processing_class=tokenizer)


def chosen_token_nll(model, tokenizer, pairs) -> float:
    """Mean negative log-likelihood of the chosen messages' tokens, computed apart from TRL."""
    total, count = 0.0, 0
    with torch.no_grad():
        for row in pairs:
            prompt_ids = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, return_dict=True)
            full_ids = tokenizer.apply_chat_template(row["prompt"] + row["chosen"], return_dict=True)
            prompt_ids, full_ids = prompt_ids["input_ids"], full_ids["input_ids"]
            assert full_ids[: len(prompt_ids)] == prompt_ids
            logits = model(input_ids=torch.tensor([full_ids])).logits[0, :-1]
            logps = torch.log_softmax(logits.float(), -1).gather(-1, torch.tensor(full_ids[1:])[:, None])[:, 0]
            message = logps[len(prompt_ids) - 1:]
            total, count = total - message.sum().item(), count + len(message)
    return total / count


def test_loss_is_dpo_plus_nll_coef_times_the_chosen_nll(tmp_path):
    from datasets import Dataset

    tokenizer = tiny_tokenizer(synthetic_corpus())
    pairs = turn_pairs(DETAILS, 3, 4)
    losses = {}
    for coef in (0.0, 0.5):
        model = tiny_causal_lm(tokenizer)
        trainer = TurnPreferenceTrainer(model, args=fast_config(tmp_path, nll_coef=coef, per_device_train_batch_size=4),
                                        train_dataset=Dataset.from_list(pairs), processing_class=tokenizer)
        batch = next(iter(trainer.get_train_dataloader()))
        trainer.model.eval()
        with torch.no_grad():
            losses[coef] = trainer.compute_loss(trainer.model, batch).item()
    # An untrained policy equals its reference, so the DPO part is exactly log 2.
    assert losses[0.0] == pytest.approx(0.693147, abs=1e-4)
    nll = chosen_token_nll(tiny_causal_lm(tokenizer), tokenizer, pairs)
    assert losses[0.5] - losses[0.0] == pytest.approx(0.5 * nll, rel=1e-3)


def test_the_length_normalised_dpo_loss_runs_through_the_shared_prompt_path(tmp_path):
    """TRL's ``sigmoid_norm`` (DPO on token-mean log-ratios: the critic's own normalisation, one of the suspects of
    turn-level DPO's stall) trains with this trainer: log 2 at the reference, then lower after a few steps."""
    from datasets import Dataset

    tokenizer = tiny_tokenizer(synthetic_corpus())
    pairs = Dataset.from_list(turn_pairs(DETAILS, 3, 8))
    args = fast_config(tmp_path, nll_coef=0.0, per_device_train_batch_size=4, loss_type="sigmoid_norm", beta=1.0,
                       learning_rate=5e-3, max_steps=6)
    assert args.loss_type == ["sigmoid_norm"]
    trainer = TurnPreferenceTrainer(tiny_causal_lm(tokenizer), args=args, train_dataset=pairs,
                                    processing_class=tokenizer)
    batch = next(iter(trainer.get_train_dataloader()))

    def loss() -> float:
        trainer.model.eval()
        with torch.no_grad():
            return trainer.compute_loss(trainer.model, batch).item()

    assert loss() == pytest.approx(0.693147, abs=1e-4)
    trainer.train()
    assert loss() < 0.69


def test_training_raises_the_margin_on_held_out_turn_pairs(tmp_path):
    """After training, asking about the hidden detail beats a filler question by a wider log-prob margin on held-out
    pairs: units, requests and filler questions none of which is in the training pairs. Five seeds (data and
    model); asserted on the median gain and on the median share of pairs whose margin grew. Measured, median
    (min-max) over seeds 0-4: gain 7.4 (6.3-7.5) nats; every held-out pair's margin up in every seed.

    And what tells DPO from fine-tuning on the chosen turns alone (whose margin gain is as large here): the rejected
    turns it trained on fall. Measured, seeds 0-2: -4.7, -4.1, -4.1 nats; with the DPO and NLL weights swapped
    (0.01 and 1) they rise, +4.8, +4.9, +6.1, as with the NLL term alone."""
    from datasets import Dataset

    tokenizer = tiny_tokenizer(learning_corpus())
    gains, raised, rejected_moves = [], [], []
    for seed in range(5):
        model = tiny_causal_lm(tokenizer, seed=seed)
        train = turn_pairs(DETAILS[:6], seed, 48)
        held_out = turn_pairs(DETAILS[6:], 100 + seed, 16, HELD_OUT_POOL)
        assert_held_out(train, held_out, shared_agent_texts=())
        before = preference_margins(model, tokenizer, held_out)
        rejected_before = message_logprobs(model, tokenizer, train, "rejected")
        trainer = TurnPreferenceTrainer(model, args=fast_config(tmp_path / str(seed), seed=seed),
                                        train_dataset=Dataset.from_list(train), processing_class=tokenizer)
        trainer.train()
        after = preference_margins(trainer.model, tokenizer, held_out)
        gains.append(statistics.mean(after) - statistics.mean(before))
        raised.append(statistics.mean(a > b for a, b in zip(after, before)))
        rejected_after = message_logprobs(trainer.model, tokenizer, train, "rejected")
        rejected_moves.append(statistics.mean(a - b for a, b in zip(rejected_after, rejected_before)))
        if seed == 0:  # the reference stayed the initial policy
            assert preference_margins(trainer.ref_model, tokenizer, held_out) == pytest.approx(before, abs=1e-4)
    print(f"margin gain {spread(gains)} {gains}; pairs raised {spread(raised)} {raised}; "
          f"trained rejected turns moved {spread(rejected_moves)} {rejected_moves}")
    assert statistics.median(gains) > 3.0, spread(gains)  # nats
    assert statistics.median(raised) >= 0.9, spread(raised)
    assert statistics.median(rejected_moves) < -2.0, (  # nats; the NLL term alone raises them
        f"the rejected turns trained on did not fall: {spread(rejected_moves)} {rejected_moves}")


def test_lora_trains_an_adapter_only(tmp_path):
    from peft import AutoPeftModelForCausalLM
    from transformers import AutoModelForCausalLM
    from trl import ModelConfig

    path = save_tiny_model(tmp_path / "base", extra_corpus=synthetic_corpus())
    tokenizer = tiny_tokenizer(synthetic_corpus())
    held_out = turn_pairs(DETAILS[6:], 1, 8, HELD_OUT_POOL)
    assert_held_out(turn_pairs(DETAILS[:6], 0, 32), held_out, shared_agent_texts=())
    model_config = ModelConfig(model_name_or_path=path, use_peft=True, lora_r=8, lora_alpha=16,
                               lora_target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])
    output = train_turn_preference(fast_config(tmp_path, learning_rate=5e-3), turn_pairs(DETAILS[:6], 0, 32),
                                   model_config=model_config)
    files = {p.name for p in (tmp_path / "policy").iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors", "tokenizer.json"} <= files
    assert "model.safetensors" not in files
    base = AutoModelForCausalLM.from_pretrained(path)
    tuned = AutoPeftModelForCausalLM.from_pretrained(output)
    assert statistics.mean(preference_margins(tuned, tokenizer, held_out)) > \
        statistics.mean(preference_margins(base, tokenizer, held_out)) + 1.0
    with tuned.disable_adapter():  # the base weights were not touched
        assert preference_margins(tuned, tokenizer, held_out) == pytest.approx(
            preference_margins(base, tokenizer, held_out), abs=1e-4)


def test_qlora_updates_only_a_lora_adapter_on_a_4bit_base_on_cpu(tmp_path):
    """bitsandbytes 0.50 quantizes to 4-bit NF4 and runs its kernels on CPU, so QLoRA runs here for real: the base
    is 4-bit, only LoRA weights train, the loss is finite and the last logged training margin is positive (a smoke
    test of the QLoRA path; learning on held-out pairs is shown with full models and LoRA)."""
    pytest.importorskip("bitsandbytes")
    from bitsandbytes.nn import Linear4bit
    from datasets import Dataset
    from trl import ModelConfig

    from sweet_trl.trainer_utils import model_init_kwargs, peft_and_quantization

    path = save_tiny_model(tmp_path / "base", extra_corpus=synthetic_corpus())
    tokenizer = tiny_tokenizer(synthetic_corpus())
    model_config = ModelConfig(model_name_or_path=path, use_peft=True, lora_r=8, lora_alpha=16, load_in_4bit=True,
                               lora_target_modules=["q_proj", "v_proj"], dtype="float32")
    config = fast_config(tmp_path, learning_rate=5e-3, num_train_epochs=1, per_device_train_batch_size=4)
    config.model_init_kwargs = model_init_kwargs(model_config, config)
    peft_config, quantization_config = peft_and_quantization(model_config)
    assert quantization_config.load_in_4bit and quantization_config.bnb_4bit_quant_type == "nf4"
    trainer = TurnPreferenceTrainer(path, args=config, train_dataset=Dataset.from_list(turn_pairs(DETAILS, 0, 8)),
                                    processing_class=tokenizer, peft_config=peft_config,
                                    quantization_config=quantization_config)
    base = trainer.model.get_base_model()
    assert base.is_loaded_in_4bit
    assert isinstance(base.model.layers[0].self_attn.q_proj.base_layer, Linear4bit)
    trainable = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    result = trainer.train()
    assert math.isfinite(result.training_loss) and result.training_loss > 0
    moved = [n for n, p in trainer.model.named_parameters() if n in trainable and not torch.equal(p, trainable[n])]
    assert any("lora_B" in n for n in moved)
    assert trainer.state.log_history[-2]["rewards/margins"] > 0


@pytest.mark.parametrize("config_path", [
    "sweet_trl.critic_config:SweetCriticConfig", "sweet_trl.policy_config:TurnPreferenceConfig",
    "sweet_trl.baselines.rejection_finetuning:RejectionFinetuneConfig",
    "sweet_trl.baselines.multiturn_dpo:MultiTurnDPOConfig",
])
def test_unset_bf16_follows_the_machine_and_a_set_one_is_kept(config_path, tmp_path):
    import importlib

    from transformers.utils import is_torch_bf16_gpu_available

    module, name = config_path.split(":")
    config_class = getattr(importlib.import_module(module), name)
    assert config_class(output_dir=str(tmp_path)).bf16 == is_torch_bf16_gpu_available()
    assert config_class(output_dir=str(tmp_path), bf16=False).bf16 is False
    if not torch.cuda.is_available():  # asked for explicitly, bf16 is kept and runs on the CPU (autocast)
        asked = config_class(output_dir=str(tmp_path), bf16=True)
        assert asked.bf16 is True and asked.use_cpu is True
