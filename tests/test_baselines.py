"""The paper's baselines: rejection fine-tuning and multi-turn DPO (loss masks, pairs, loss, training)."""

from __future__ import annotations

import copy
import statistics

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

from helpers_learning import (
    assert_held_out,
    decisive_turn_pairs,
    learning_corpus,
    learning_tokenizer,
    split_trajectories,
    spread,
)
from helpers_tiny_models import (
    ASSUMPTION,
    collaborative_trajectories,
    save_tiny_model,
    synthetic_corpus,
    tiny_causal_lm,
    tiny_tokenizer,
)

from sweet_trl.baselines.multiturn_dpo import (
    MultiTurnDPOConfig,
    MultiTurnDPOTrainer,
    multiturn_dpo_pairs,
    train_multiturn_dpo,
)
from sweet_trl.baselines.rejection_finetuning import (
    RejectionFinetuneConfig,
    rft_dataset,
    train_rejection_finetune,
)
from sweet_trl.turn_pairs import env_instructions

EOT = "<|eot|>"
FAST = dict(bf16=False, use_cpu=True, gradient_checkpointing=False, report_to="none", save_strategy="no",
            logging_steps=1, disable_tqdm=True, learning_rate=1e-3, max_length=512)


def agent_spans(input_ids, mask) -> list[list[int]]:
    """Contiguous runs of token ids where ``mask`` is 1."""
    spans, current = [], []
    for token, bit in zip(input_ids, mask):
        if bit:
            current.append(token)
        elif current:
            spans.append(current)
            current = []
    return spans + ([current] if current else [])


def agent_messages(record) -> list[str]:
    return [m["content"] for m in record["dialogue_history"] if m["role"] == "assistant"]


# ---------------------------------------------------------------------------------------------------------------
# Rejection fine-tuning

def test_rft_trains_on_the_agent_turns_of_successful_trajectories_only(tmp_path):
    from trl import SFTTrainer

    tokenizer = tiny_tokenizer(synthetic_corpus())
    records = collaborative_trajectories(5, per_task=2, num_agent_turns=3)
    failed_by_infra = copy.deepcopy(records[0])
    failed_by_infra.update(episode_id="task-0/infra", outcome="env_error")
    config = RejectionFinetuneConfig(output_dir=str(tmp_path / "rft"), per_device_train_batch_size=8, **FAST)
    dataset = rft_dataset(records + [failed_by_infra], tokenizer, config)
    successful = {r["episode_id"]: r for r in records if r["success"]}
    assert sorted(dataset["episode_id"]) == sorted(successful)

    trainer = SFTTrainer(tiny_causal_lm(tokenizer), args=config, train_dataset=dataset, processing_class=tokenizer)
    # The loss mask as the trainer built it (labels != -100), then as a collated batch feeds it to the model.
    for row in trainer.train_dataset:
        mask = [label != -100 for label in row["labels"]]
        spans = [tokenizer.decode(span) for span in agent_spans(row["input_ids"], mask)]
        assert spans == [m + EOT for m in agent_messages(successful[row["episode_id"]])]
        context = tokenizer.decode([t for t, m in zip(row["input_ids"], mask) if not m])
        assert env_instructions("ColBench-Backend-v0") in context and "Okay, noted." in context
        assert "Okay, noted." not in "".join(spans)
    batch = next(iter(trainer.get_train_dataloader()))
    decoded = {tokenizer.decode(ids[labels != -100]) for ids, labels in zip(batch["input_ids"], batch["labels"])}
    assert decoded == {"".join(m + EOT for m in agent_messages(r)) for r in successful.values()}


def test_rft_threshold_for_continuous_rewards():
    tokenizer = tiny_tokenizer(synthetic_corpus())
    records = collaborative_trajectories(3, per_task=2, num_agent_turns=2)
    for record, reward in zip(records, [0.95, 0.2, 0.81, 0.5, 0.1, 0.79]):
        record.pop("success")
        record["reward"] = reward
    config = RejectionFinetuneConfig(output_dir="unused", min_reward=0.8, **FAST)
    assert sorted(rft_dataset(records, tokenizer, config)["reward"]) == [0.81, 0.95]
    with pytest.raises(ValueError, match="no trajectory to imitate"):
        rft_dataset(records, tokenizer, RejectionFinetuneConfig(output_dir="unused", min_reward=0.99, **FAST))
    with pytest.raises(ValueError, match="assistant_only_loss"):
        RejectionFinetuneConfig(output_dir="unused", assistant_only_loss=True, **FAST)


SEEDS = range(5)


def agent_nll(model, rows) -> float:
    """Mean negative log-likelihood per agent-turn token of tokenised RFT rows."""
    total, count = 0.0, 0
    for row in rows:
        ids = torch.tensor([row["input_ids"]])
        with torch.no_grad():
            logps = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), -1)
        token_logps = logps.gather(-1, ids[0, 1:, None])[:, 0]
        mask = torch.tensor(row["assistant_masks"][1:], dtype=torch.bool)
        total, count = total - token_logps[mask].sum().item(), count + int(mask.sum())
    return total / count


def message_logps(model, tokenizer, pairs, key: str) -> list[float]:
    """log pi(pair[key] | prompt) of each turn pair, summed over the message's tokens (as DPO tokenises it)."""
    from sweet_trl.policy_trainer import _message_logprobs, _prompt_and_message_ids

    model.eval()
    return _message_logprobs(model, tokenizer, [_prompt_and_message_ids(tokenizer, p["prompt"], p[key])
                                                for p in pairs], torch)


def test_rft_raises_the_successful_turn_over_the_failed_one_on_held_out_dialogues(tmp_path):
    """RFT on 8 tasks whose failures say ``ASSUMPTION`` ("Let me assume the usual unit.") where the successes ask
    about the hidden unit; on 16 held-out tasks (no request, filler, answer or ``c`` in common with training) the
    agent turns of the successful dialogues get more likely, and at each held-out decisive turn the question gains
    on ``ASSUMPTION``. The assumption is a message training has seen, in failures only: an RFT that imitates every
    trajectory raises it more than the question (margin gain -25 and -22 nats on seeds 0 and 1: tests/mutations.py,
    ``rft_imitates_failures``); comparing against a filler training never saw would not tell the two apart. On every seed: NLL drop over 0.5 nats per agent
    token, margin gain over 3 nats, every held-out pair's margin up. Measured over seeds 0-4 (NLL drop, margin
    gain, pairs raised): NLL drop 1.16, 1.14, 1.21, 1.08, 1.31; margin gain 17.0, 15.6, 14.3, 13.1, 16.6; every pair
    raised on every seed."""
    from transformers import AutoModelForCausalLM
    from trl import ModelConfig

    tokenizer = learning_tokenizer()
    rows_by_seed = []
    for seed in SEEDS:
        path = save_tiny_model(tmp_path / f"base{seed}", extra_corpus=learning_corpus(), seed=seed)
        train, held_out = split_trajectories(8, 16, seed=seed, failure="assume")
        config = RejectionFinetuneConfig(output_dir=str(tmp_path / f"rft{seed}"), per_device_train_batch_size=4,
                                         num_train_epochs=3, seed=seed, **{**FAST, "learning_rate": 1e-2})
        output = train_rejection_finetune(config, train, model_config=ModelConfig(model_name_or_path=path))
        if seed == 0:
            assert {"model.safetensors", "tokenizer.json"} <= {p.name for p in (tmp_path / "rft0").iterdir()}
        pairs = decisive_turn_pairs(held_out)
        assert {p["rejected"][0]["content"] for p in pairs} == {ASSUMPTION}
        assert_held_out(train, held_out)
        assert_held_out(train, pairs)
        rows = rft_dataset(held_out, tokenizer, config)  # the held-out successful trajectories
        base, tuned = AutoModelForCausalLM.from_pretrained(path), AutoModelForCausalLM.from_pretrained(output)
        nll_drop = agent_nll(base, rows) - agent_nll(tuned, rows)
        gains = [(tc - tr) - (bc - br) for tc, tr, bc, br in zip(
            message_logps(tuned, tokenizer, pairs, "chosen"), message_logps(tuned, tokenizer, pairs, "rejected"),
            message_logps(base, tokenizer, pairs, "chosen"), message_logps(base, tokenizer, pairs, "rejected"))]
        margin_gain, raised = statistics.mean(gains), statistics.mean(g > 0 for g in gains)
        rows_by_seed.append((seed, round(nll_drop, 2), round(margin_gain, 1), round(raised, 3)))
        print(f"seed {seed}: NLL drop {nll_drop:.2f}, decisive margin gain {margin_gain:.1f}, raised {raised:.3f}")
        assert nll_drop > 0.5, f"seed {seed}: NLL drop {nll_drop:.2f}; (seed, drop, gain, raised) {rows_by_seed}"
        assert margin_gain > 3.0, f"seed {seed}: decisive margin gain {margin_gain:.1f}; {rows_by_seed}"
        assert raised == 1.0, f"seed {seed}: held-out pairs raised {raised:.3f}; {rows_by_seed}"
    print(f"NLL drop {spread([r[1] for r in rows_by_seed])}; decisive margin gain "
          f"{spread([r[2] for r in rows_by_seed])}; (seed, NLL drop, margin gain, raised) {rows_by_seed}")


# ---------------------------------------------------------------------------------------------------------------
# Multi-turn DPO

def test_multiturn_pairs_follow_the_critic_pair_rules_without_privileged_info():
    records = collaborative_trajectories(4, per_task=3, num_agent_turns=3)  # rewards 1, 0, 1 per task
    config = MultiTurnDPOConfig(output_dir="unused", pair_preset="backend", **FAST)
    assert (config.pair_rule, config.require_success, config.min_reward_gap) == ("best_vs_rest", True, 0.0)
    pairs = multiturn_dpo_pairs(records, config)
    assert len(pairs) == 4  # per task: the best successful trajectory against the failed one
    by_episode = {r["episode_id"]: r for r in records}
    for pair in pairs:
        assert pair["chosen_reward"] == 1.0 and pair["rejected_reward"] == 0.0
        for side in ("chosen", "rejected"):
            conversation = pair[side]
            record = by_episode[pair[f"{side}_episode_id"]]
            assert conversation[0] == {"role": "system", "content": env_instructions("ColBench-Backend-v0")}
            assert conversation[1:] == [{"role": m["role"], "content": m["content"]}
                                        for m in record["dialogue_history"]]
            assert all(record["task"]["ground_truth"] not in m["content"] for m in conversation)
    assert "privileged" not in pairs.column_names


def test_pair_fields_that_are_set_win_over_the_preset():
    records = collaborative_trajectories(3, per_task=3, num_agent_turns=2)
    for record in records:  # nobody passes every test: partial credit only
        record["reward"], record["success"] = (0.5 if record["reward"] else 0.0), False
    with pytest.raises(ValueError, match="no trajectory pair for multi-turn DPO: in 3 of 3 tasks the best trajectory did not succeed.*require_success=False"):
        multiturn_dpo_pairs(records, MultiTurnDPOConfig(output_dir="unused", pair_preset="backend", **FAST))
    config = MultiTurnDPOConfig(output_dir="unused", pair_preset="backend", require_success=False, **FAST)
    assert config.pair_rule_settings() == {"rule": "best_vs_rest", "require_success": False, "min_reward_gap": 0.0}
    assert len(multiturn_dpo_pairs(records, config)) == 3
    plain = MultiTurnDPOConfig(output_dir="unused", **FAST)
    assert plain.pair_rule_settings() == {"rule": "best_vs_rest", "require_success": True, "min_reward_gap": 0.0}
    plain.apply_pair_preset("frontend")  # what the pipeline does when no preset is given
    assert plain.pair_rule_settings() == {"rule": "all_pairs", "require_success": False, "min_reward_gap": 0.1}
    with pytest.raises(ValueError, match="pair_rule"):
        MultiTurnDPOConfig(output_dir="unused", pair_rule="best", **FAST)


def masked_token_logps(model, input_ids, mask) -> list[float]:
    """Log-probabilities of the tokens where ``mask`` is 1, each given the tokens before it."""
    ids = torch.tensor([input_ids])
    with torch.no_grad():
        logps = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), -1)
    token_logps = logps.gather(-1, ids[0, 1:, None])[:, 0]
    return token_logps[torch.tensor(mask[1:], dtype=torch.bool)].tolist()


def sequence_logps(model, input_ids, mask) -> float:
    return sum(masked_token_logps(model, input_ids, mask))


def test_multiturn_dpo_masks_cover_exactly_the_agent_turns_and_the_loss_sums_over_them(tmp_path):
    tokenizer = tiny_tokenizer(synthetic_corpus())
    records = collaborative_trajectories(3, per_task=2, num_agent_turns=3)
    config = MultiTurnDPOConfig(output_dir=str(tmp_path / "mtdpo"), pair_preset="backend",
                                per_device_train_batch_size=3, **FAST)
    pairs = multiturn_dpo_pairs(records, config)
    reference = tiny_causal_lm(tokenizer)
    policy = copy.deepcopy(reference)
    with torch.no_grad():  # a policy that differs from its reference, so the loss is not just log 2
        for p in policy.parameters():
            p.add_(0.02 * torch.randn_like(p))
    trainer = MultiTurnDPOTrainer(policy, ref_model=reference, args=config, train_dataset=pairs,
                                  processing_class=tokenizer)
    rows = trainer.train_dataset
    assert len(rows) == len(pairs) == 3
    for row, pair in zip(rows, pairs):
        for side in ("chosen", "rejected"):
            spans = [tokenizer.decode(s) for s in agent_spans(row[f"{side}_input_ids"], row[f"{side}_mask"])]
            expected = [m["content"] + EOT for m in pair[side] if m["role"] == "assistant"]
            assert spans == expected
            assert tokenizer.decode(row[f"{side}_input_ids"]).count("Okay, noted.") == 2  # human turns: context

    loader = torch.utils.data.DataLoader(rows, batch_size=3, collate_fn=trainer.data_collator)
    batch = next(iter(loader))
    assert set(batch) == {"input_ids", "attention_mask", "completion_mask"}
    trainer.model.eval()
    with torch.no_grad():
        loss = trainer.compute_loss(trainer.model, batch).item()
    margins = []
    for row in rows:
        logratio = {side: sequence_logps(policy, row[f"{side}_input_ids"], row[f"{side}_mask"])
                    - sequence_logps(reference, row[f"{side}_input_ids"], row[f"{side}_mask"])
                    for side in ("chosen", "rejected")}
        margins.append(config.beta * (logratio["chosen"] - logratio["rejected"]))
    expected = -torch.nn.functional.logsigmoid(torch.tensor(margins)).mean().item()
    assert loss == pytest.approx(expected, rel=1e-4)
    assert abs(loss - 0.693147) > 1e-4


def test_multiturn_dpo_nll_coef_adds_the_chosen_dialogues_agent_token_nll(tmp_path):
    tokenizer = tiny_tokenizer(synthetic_corpus())
    records = collaborative_trajectories(3, per_task=2, num_agent_turns=3)
    losses, rows = {}, None
    for coef in (0.0, 0.5):
        config = MultiTurnDPOConfig(output_dir=str(tmp_path / "mtdpo"), pair_preset="backend", nll_coef=coef,
                                    per_device_train_batch_size=3, **FAST)
        assert config.loss_type == (["sigmoid", "sft"] if coef else ["sigmoid"])
        trainer = MultiTurnDPOTrainer(tiny_causal_lm(tokenizer), args=config,
                                      train_dataset=multiturn_dpo_pairs(records, config), processing_class=tokenizer)
        rows = trainer.train_dataset
        batch = next(iter(torch.utils.data.DataLoader(rows, batch_size=3, collate_fn=trainer.data_collator)))
        trainer.model.eval()
        with torch.no_grad():
            losses[coef] = trainer.compute_loss(trainer.model, batch).item()
    # An untrained policy equals its reference: the DPO part is log 2, the rest is the NLL term.
    assert losses[0.0] == pytest.approx(0.693147, abs=1e-4)
    policy = tiny_causal_lm(tokenizer)
    token_logps = [lp for row in rows for lp in masked_token_logps(policy, row["chosen_input_ids"], row["chosen_mask"])]
    nll = -sum(token_logps) / len(token_logps)  # every agent token of the chosen dialogues, human turns left out
    assert losses[0.5] - losses[0.0] == pytest.approx(0.5 * nll, rel=1e-3)


def test_multiturn_dpo_prefers_asking_to_answering_early_on_held_out_tasks(tmp_path):
    """Multi-turn DPO on the pairs of 8 tasks whose failures answer at the decisive turn, where the successes ask
    about the hidden unit first (the answer's text is the same); on the pairs of 16 held-out tasks (no request,
    filler, answer or ``c`` in common with training) the successful dialogue's agent turns gain log-probability on
    the failed one's, and at the decisive turn the question gains on the early answer. Answers are what every
    successful dialogue ends with, so training on the chosen dialogues alone raises the early answer more than the
    question (about +20 nats against +9 on seeds 0 and 1, a decisive-turn margin gain of -11: tests/mutations.py,
    ``mtdpo_rejected_unscored``); only the rejected side's gradient holds it back. On every seed: dialogue margin gain over 3 nats with every held-out pair's
    margin up, decisive-turn margin gain over 2 nats. Measured over seeds 0-4 (dialogue margin gain, pairs raised,
    decisive-turn margin gain, the early answer's own change): dialogue 14.5, 16.1, 16.6, 17.1, 14.4; every pair
    raised on every seed; decisive 6.8, 10.8, 10.2, 9.9, 7.3; early answer +4.0, -0.2, +0.6, +1.1, +3.8."""
    from transformers import AutoModelForCausalLM
    from trl import ModelConfig

    from sweet_trl.baselines.multiturn_dpo import tokenize_multiturn_pair

    tokenizer = learning_tokenizer()
    rows_by_seed = []
    for seed in SEEDS:
        path = save_tiny_model(tmp_path / f"base{seed}", extra_corpus=learning_corpus(), seed=seed)
        train, held_out = split_trajectories(8, 16, seed=seed, failure="answer_early")
        config = MultiTurnDPOConfig(output_dir=str(tmp_path / f"mtdpo{seed}"), pair_preset="backend",
                                    per_device_train_batch_size=4, num_train_epochs=3, seed=seed,
                                    **{**FAST, "learning_rate": 3e-3})
        output = train_multiturn_dpo(config, train, model_config=ModelConfig(model_name_or_path=path))
        if seed == 0:
            assert (tmp_path / "mtdpo0" / "model.safetensors").exists() and output == str(tmp_path / "mtdpo0")
        pairs = multiturn_dpo_pairs(held_out, config)
        assert_held_out(train, held_out)
        assert_held_out(multiturn_dpo_pairs(train, config), pairs)
        tuned, base = AutoModelForCausalLM.from_pretrained(output), AutoModelForCausalLM.from_pretrained(path)
        gains = []
        for pair in pairs:
            row = tokenize_multiturn_pair(pair, tokenizer)
            margin = {name: sequence_logps(m, row["chosen_input_ids"], row["chosen_mask"])
                      - sequence_logps(m, row["rejected_input_ids"], row["rejected_mask"])
                      for name, m in (("tuned", tuned), ("base", base))}
            gains.append(margin["tuned"] - margin["base"])
        decisive = decisive_turn_pairs(held_out)
        change = {key: statistics.mean(t - b for t, b in zip(message_logps(tuned, tokenizer, decisive, key),
                                                             message_logps(base, tokenizer, decisive, key)))
                  for key in ("chosen", "rejected")}
        decisive_gain = change["chosen"] - change["rejected"]
        gain, raised = statistics.mean(gains), statistics.mean(g > 0 for g in gains)
        rows_by_seed.append((seed, round(gain, 1), round(raised, 3), round(decisive_gain, 1),
                             round(change["rejected"], 1)))
        print(f"seed {seed}: held-out dialogue margin gain {gain:.1f}, raised {raised:.3f}; decisive-turn margin "
              f"gain {decisive_gain:.1f} (early answer {change['rejected']:+.1f})")
        message = f"seed {seed}; (seed, dialogue gain, raised, decisive gain, early answer) {rows_by_seed}"
        assert gain > 3.0, message
        assert raised == 1.0, message
        assert decisive_gain > 2.0, message
    print(f"dialogue margin gain {spread([r[1] for r in rows_by_seed])}; decisive-turn margin gain "
          f"{spread([r[3] for r in rows_by_seed])}; (seed, dialogue gain, raised, decisive gain, early answer) "
          f"{rows_by_seed}")


def test_multiturn_dpo_rejects_other_loss_types():
    with pytest.raises(ValueError, match="only loss_type='sigmoid'"):
        MultiTurnDPOConfig(output_dir="unused", loss_type=["ipo"], **FAST)
    with pytest.raises(ValueError, match="only loss_type='sigmoid'"):
        MultiTurnDPOConfig(output_dir="unused", loss_type=["ipo"], nll_coef=1.0, **FAST)
    with pytest.raises(ValueError, match="nll_coef"):
        MultiTurnDPOConfig(output_dir="unused", nll_coef=-0.1, **FAST)
    with pytest.raises(ValueError, match="pair_preset"):
        MultiTurnDPOConfig(output_dir="unused", pair_preset="mobile", **FAST)


# ---------------------------------------------------------------------------------------------------------------
# Zero-shot

def test_zero_shot_evaluates_the_base_policy_without_privileged_info(tmp_path):
    from colbench_gym.tasks import resolve_tasks
    from sweet_trl.baselines import evaluate_zero_shot
    from sweet_trl.generation import SamplingParams, TransformersBackend

    tokenizer = tiny_tokenizer(synthetic_corpus())
    backend = TransformersBackend(tiny_causal_lm(tokenizer), tokenizer, device="cpu", name="tiny-base")
    tasks = resolve_tasks("test", "backend")[:2]
    result = evaluate_zero_shot(backend, tasks=[t.to_row() for t in tasks], output_dir=tmp_path / "eval",
                                sampling=SamplingParams(temperature=0.0, max_new_tokens=4), num_envs=2,
                                env_kwargs={"max_turns": 2}, progress=False, verbose=False)
    assert result.metrics["episodes"] == 2 and result.metrics["policy"] == "tiny-base"
    assert (tmp_path / "eval" / "metrics.json").exists()
    for record in result.records:
        assert record["policy"] == "tiny-base" and len(record["dialogue_history"]) >= 2
        prompts = [m["input"] for m in record["dialogue_history"] if m["role"] == "assistant"]
        assert prompts and all(record["task"]["ground_truth"] not in p for p in prompts)
