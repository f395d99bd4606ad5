"""SweetCriticTrainer and SweetCritic on tiny CPU models: the log-prob path against a plain computation, the
metrics, a trained critic for inference and saving, bad data, PEFT, QLoRA, the Hub card. The learning claims where
c matters (asymmetry, credit assignment, the chain to the policy), over five seeds, are in test_learning_critic.py.

The tiny models start from random weights, so they train at learning rate 3e-3; the released recipe's 2e-7 is for
8B models initialised from an instruction-tuned LLM.
"""

import json
import logging
import math
import statistics

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.usefixtures("one_torch_thread")
pytest.importorskip("trl")

from helpers_learning import assert_held_out, split_trajectories
from helpers_tiny_models import (
    DETAILS,
    FILLERS,
    collaborative_trajectories,
    decisive_question,
    save_tiny_model,
    synthetic_corpus,
    tiny_causal_lm,
    tiny_tokenizer,
)

from sweet_trl.critic import CRITIC_METADATA_FILE, SweetCritic
from sweet_trl.critic_config import SweetCriticConfig
from sweet_trl.critic_trainer import SweetCriticTrainer
from sweet_trl.pairs import build_critic_pairs, critic_pair_dataset

TEST_LR = 3e-3


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_tokenizer(synthetic_corpus())


def make_config(output_dir, **overrides) -> SweetCriticConfig:
    values = dict(
        output_dir=str(output_dir), learning_rate=TEST_LR, num_train_epochs=3, per_device_train_batch_size=8,
        per_device_eval_batch_size=32, bf16=False, use_cpu=True, gradient_checkpointing=False, report_to="none",
        save_strategy="no", logging_steps=4, lr_scheduler_type="constant", max_length=512, disable_tqdm=True,
        seed=0,
    )
    values.update(overrides)
    return SweetCriticConfig(**values)


def pairs_of(records, **kwargs):
    return critic_pair_dataset(records, **kwargs)


def decisive_argmax_rate(critic, records):
    advantages = critic.turn_advantages(records)
    hits = [max(range(len(a)), key=a.__getitem__) == r["decisive_turn"] for a, r in zip(advantages, records)]
    return sum(hits) / len(hits)


# --------------------------------------------------------------------------------------------------------------
# The training log-prob path (TRL's fused LM head) against a plain log_softmax gather

def peaked(model):
    """The model with a sharp, position-dependent next-token distribution: a random init predicts nearly uniform
    log-probs (about -log V everywhere), against which an off-by-one in the gather would go unnoticed."""
    with torch.no_grad():
        model.lm_head.weight.mul_(40.0)
    return model


def plain_turn_logps(model, conversations):
    """Per-turn sums of ``log_softmax(logits)[i - 1, token_i]``, one unpadded sequence at a time, no TRL."""
    out = []
    with torch.no_grad():
        for conv in conversations:
            ids = torch.tensor([conv.input_ids])
            logps = torch.log_softmax(model(input_ids=ids).logits[0].float(), -1)
            sums = [0.0] * conv.num_turns
            for i in range(1, len(conv.input_ids)):
                if conv.turn_ids[i]:
                    sums[conv.turn_ids[i] - 1] += logps[i - 1, conv.input_ids[i]].item()
            out.append(sums)
    return out


def critic_conversations(tokenizer, records, use_privileged=True):
    from sweet_trl.tokenization import CriticInputFormat, tokenize_critic_input

    return [tokenize_critic_input(tokenizer, r["dialogue_history"], r["task"]["ground_truth"],
                                  CriticInputFormat(use_privileged=use_privileged)).conversation for r in records]


def test_forward_turn_logps_is_a_log_softmax_gather_on_padded_batches(tokenizer):
    from trl.trainer.utils import pad

    from sweet_trl.critic import add_fused_head_once, forward_turn_logps

    records = collaborative_trajectories(3, per_task=1, num_agent_turns=3, seed=61)
    records[1]["dialogue_history"] = records[1]["dialogue_history"][:3]  # one agent turn: a shorter row, padded
    conversations = critic_conversations(tokenizer, records)
    assert len({len(c.input_ids) for c in conversations}) == 3 and [c.num_turns for c in conversations] == [3, 1, 3]
    model = peaked(tiny_causal_lm(tokenizer, seed=3)).eval()
    expected = plain_turn_logps(model, conversations)
    add_fused_head_once(model)
    batch = {"input_ids": pad([torch.tensor(c.input_ids) for c in conversations], padding_value=tokenizer.pad_token_id),
             "attention_mask": pad([torch.ones(len(c.input_ids), dtype=torch.long) for c in conversations],
                                   padding_value=0),
             "turn_ids": pad([torch.tensor(c.turn_ids) for c in conversations], padding_value=0)}
    with torch.no_grad():
        sums, _ = forward_turn_logps(model, batch["input_ids"], batch["attention_mask"], batch["turn_ids"], 3)
    for row, want in zip(sums.tolist(), expected):
        assert row[:len(want)] == pytest.approx(want, rel=1e-4, abs=1e-4)
        assert row[len(want):] == [0.0] * (3 - len(want))  # turns a padded row does not have
    # the check can see an off-by-one: gathering each turn's tokens one position late changes the sums a lot
    late = [(a + 1, b + 1) for a, b in conversations[0].turn_spans]
    assert all(abs(a - b) > 1.0 for a, b in zip(expected[0], plain_shifted(model, conversations[0], late)))


def plain_shifted(model, conv, spans):
    ids = torch.tensor([conv.input_ids])
    with torch.no_grad():
        logps = torch.log_softmax(model(input_ids=ids).logits[0].float(), -1)
    return [sum(logps[i - 1, conv.input_ids[i]].item() for i in range(a, min(b, len(conv.input_ids))))
            for a, b in spans]


def test_critic_and_reference_scores_are_log_softmax_gathers(tokenizer):
    """SweetCritic's critic and reference sums, for a full fine-tune and for LoRA (reference = adapters disabled),
    whole dialogues and a shared-prefix batch of candidates, each equal a plain gather on the right model."""
    import copy

    from peft import LoraConfig, get_peft_model

    records = collaborative_trajectories(4, per_task=1, num_agent_turns=3, seed=62)
    conversations = critic_conversations(tokenizer, records)
    base = peaked(tiny_causal_lm(tokenizer, seed=4)).eval()
    tuned = copy.deepcopy(base)
    with torch.no_grad():
        for p in tuned.parameters():
            p.add_(0.05 * torch.randn_like(p))
    lora = get_peft_model(copy.deepcopy(base), LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                          init_lora_weights=False, task_type="CAUSAL_LM"))
    merged = copy.deepcopy(lora).merge_and_unload().eval()  # the adapted model as a plain model
    critics = {"full": (SweetCritic(tuned, tokenizer, ref_model=copy.deepcopy(base), batch_size=3), tuned),
               "lora": (SweetCritic(lora, tokenizer, batch_size=3), merged)}
    reference = plain_turn_logps(base, conversations)
    for name, (critic, plain_critic) in critics.items():
        wanted = plain_turn_logps(plain_critic, conversations)
        assert all(abs(w - r) > 1e-2 for ws, rs in zip(wanted, reference) for w, r in zip(ws, rs)), name
        for (got_critic, got_ref, counts), want, ref, conv in zip(critic._turn_logps(conversations), wanted,
                                                                  reference, conversations):
            assert got_critic.tolist() == pytest.approx(want, rel=1e-4, abs=1e-4), name
            assert got_ref.tolist() == pytest.approx(ref, rel=1e-4, abs=1e-4), name
            assert counts.tolist() == [b - a for a, b in conv.turn_spans]
        # candidates after a shared history: the prefix once through a KV cache, the rest as a padded batch
        history = records[0]["dialogue_history"][:3]
        candidates = [FILLERS[0], decisive_question("kelvin"), "Yes."]
        details = critic.score_candidates(history, candidates, records[0]["task"]["ground_truth"],
                                          return_details=True)
        dialogues = [{"dialogue_history": history + [{"role": "assistant", "content": c}],
                      "task": records[0]["task"]} for c in candidates]
        full = critic_conversations(tokenizer, dialogues)
        for i, conv in enumerate(full):
            n = conv.turn_spans[-1][1] - conv.turn_spans[-1][0]
            assert details.num_tokens[i] == n
            assert details.critic_mean_logps[i] == pytest.approx(plain_turn_logps(plain_critic, [conv])[0][-1] / n,
                                                                 rel=1e-4, abs=1e-4), name
            assert details.ref_mean_logps[i] == pytest.approx(plain_turn_logps(base, [conv])[0][-1] / n,
                                                              rel=1e-4, abs=1e-4), name
        # the reference without c (ranking "critic_minus_reference_without_c"): same candidate tokens, no c
        without_c = critic.score_candidates(history, candidates, records[0]["task"]["ground_truth"],
                                            return_details=True, reference_without_privileged=True)
        assert without_c.critic_mean_logps == pytest.approx(details.critic_mean_logps, rel=1e-6), name
        bare = critic_conversations(tokenizer, dialogues, use_privileged=False)
        for i, conv in enumerate(bare):
            n = conv.turn_spans[-1][1] - conv.turn_spans[-1][0]
            assert n == details.num_tokens[i]
            want = plain_turn_logps(base, [conv])[0][-1] / n
            assert without_c.ref_mean_logps[i] == pytest.approx(want, rel=1e-4, abs=1e-4), name
            assert abs(want - details.ref_mean_logps[i]) > 1e-3, name  # c does change the reference's view


def test_the_rank_stage_measures_each_ranking_against_the_reference_it_names(tokenizer):
    """The ``rank`` stage's own path (``turn_pairs.rank_candidates`` with a real LoRA critic, no stand-in scorer):
    under ``critic_minus_reference_without_c`` the reference is the initial model reading the dialogue without c
    (the same candidate tokens), under the other rankings the initial model reading c as the critic does; the
    critic's side reads c under all three, and the ranking score is the critic's mean log-prob minus the named
    baseline. Each expected value is a plain gather on the base model."""
    import copy

    from peft import LoraConfig, get_peft_model

    from sweet_trl.losses import RANKING_MODES as RANKINGS
    from sweet_trl.turn_pairs import TurnPairsConfig, rank_candidates

    record = collaborative_trajectories(1, per_task=1, num_agent_turns=3, seed=63)[0]
    base = peaked(tiny_causal_lm(tokenizer, seed=6)).eval()
    lora = get_peft_model(copy.deepcopy(base), LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                          init_lora_weights=False, task_type="CAUSAL_LM"))
    merged = copy.deepcopy(lora).merge_and_unload().eval()
    critic = SweetCritic(lora, tokenizer, batch_size=2)
    history, c = record["dialogue_history"][:3], record["task"]["ground_truth"]
    candidates = [FILLERS[1], decisive_question("kelvin"), "Yes."]
    row = {"state_id": "s0", "task_id": "t0", "prompt": [{"role": "system", "content": "Ask, then answer."}, *history],
           "privileged": c, "candidates": candidates, "policy_mean_logprobs": [-1.0, -2.0, -3.0]}
    dialogues = [{"dialogue_history": history + [{"role": "assistant", "content": text}], "task": record["task"]}
                 for text in candidates]

    def mean_last_turn(model, use_privileged):
        out = []
        for conv in critic_conversations(tokenizer, dialogues, use_privileged=use_privileged):
            start, end = conv.turn_spans[-1]
            out.append(plain_turn_logps(model, [conv])[0][-1] / (end - start))
        return out

    critic_with_c = mean_last_turn(merged, True)
    reference = {"with_c": mean_last_turn(base, True), "without_c": mean_last_turn(base, False)}
    assert all(abs(a - b) > 1e-3 for a, b in zip(reference["with_c"], reference["without_c"]))  # c shows
    baseline = {"critic_minus_reference_without_c": reference["without_c"], "critic_advantage": reference["with_c"],
                "critic_minus_policy_logprob": row["policy_mean_logprobs"]}
    for ranking in RANKINGS:
        (ranked,) = rank_candidates([row], critic, TurnPairsConfig(ranking=ranking)).to_list()
        named = "without_c" if ranking == "critic_minus_reference_without_c" else "with_c"
        assert ranked["critic_mean_logprobs"] == pytest.approx(critic_with_c, rel=1e-4, abs=1e-4), ranking
        assert ranked["reference_mean_logprobs"] == pytest.approx(reference[named], rel=1e-4, abs=1e-4), (
            f"{ranking}: the reference is not the one reading the dialogue {named.replace('_', ' ')}")
        assert ranked["ranking_scores"] == pytest.approx([a - b for a, b in zip(critic_with_c, baseline[ranking])],
                                                         rel=1e-4, abs=1e-4), ranking


def test_eval_pair_accuracy_is_the_fraction_of_pairs_not_a_mean_of_batches(tmp_path, tokenizer):
    """Five held-out pairs in batches of 4 and 1: the logged accuracy counts pairs (a mean of the two batch means
    would weigh the single last pair like the four others)."""
    import copy

    from datasets import Dataset

    base = tiny_causal_lm(tokenizer, seed=5)
    critic_model = copy.deepcopy(base)
    with torch.no_grad():  # a critic that ranks some pairs right and some wrong
        for p in critic_model.parameters():
            p.add_(0.05 * torch.randn_like(p, generator=torch.Generator().manual_seed(7)))
    pairs, _ = build_critic_pairs(collaborative_trajectories(24, seed=71))
    scorer = SweetCritic(critic_model, tokenizer, ref_model=copy.deepcopy(base))
    chosen = scorer.trajectory_scores([p["chosen"] for p in pairs], [p["privileged"] for p in pairs])
    rejected = scorer.trajectory_scores([p["rejected"] for p in pairs], [p["privileged"] for p in pairs])
    right = [p for p, c, r in zip(pairs, chosen, rejected) if c > r]
    wrong = [p for p, c, r in zip(pairs, chosen, rejected) if c <= r]
    assert len(right) >= 2 and len(wrong) >= 3, (len(right), len(wrong))
    held_out = wrong[:3] + right[:2]  # batches [w, w, w, r] and [r]: 2 of 5 pairs right, batch means 0.25 and 1
    trainer = SweetCriticTrainer(critic_model, ref_model=copy.deepcopy(base),
                                 args=make_config(tmp_path, per_device_eval_batch_size=4),
                                 train_dataset=Dataset.from_list(held_out), eval_dataset=Dataset.from_list(held_out),
                                 processing_class=tokenizer)
    metrics = trainer.evaluate()
    assert metrics["eval_pair_accuracy"] == pytest.approx(2 / 5)
    margins = [0.1 * (c - r) for p, c, r in zip(pairs, chosen, rejected) if p in held_out]
    assert metrics["eval_margin"] == pytest.approx(statistics.mean(margins), rel=1e-3, abs=1e-6)


# --------------------------------------------------------------------------------------------------------------
# Learning and credit assignment

@pytest.fixture(scope="module")
def trained(tmp_path_factory, tokenizer):
    """A critic trained where failed trajectories never ask about the hidden unit (``failure="no_question"``), so
    the dialogue alone shows which trajectory won: the easy case, c is not needed. Its held-out tasks come from
    disjoint pools (requests, fillers, answers, privileged texts; see ``helpers_learning``). The tests below use
    it as a trained critic for inference, saving and metrics; the learning claims where c matters, over several
    seeds, are in ``test_learning_critic.py``."""
    train_records, heldout = split_trajectories(96, 48, seed=1, failure="no_question", shared_context=False)
    model = tiny_causal_lm(tokenizer)
    initial = tiny_causal_lm(tokenizer)  # same seed: identical weights, kept as the reference for reloading
    trainer = SweetCriticTrainer(model, args=make_config(tmp_path_factory.mktemp("critic")),
                                 train_dataset=pairs_of(train_records), eval_dataset=pairs_of(heldout),
                                 processing_class=tokenizer)
    assert_held_out(train_records, heldout)
    assert_held_out(pairs_of(train_records), pairs_of(heldout))
    before = trainer.evaluate()
    trainer.train()
    after = trainer.evaluate()
    return {"trainer": trainer, "heldout": heldout, "before": before, "after": after, "initial": initial}


def test_fixture_critic_ranks_held_out_pairs_where_the_text_alone_decides(trained):
    """One seed, the no_question case: held-out accuracy and the decisive turn's credit (where c is needed, and
    over five seeds: test_learning_critic.py)."""
    before, after = trained["before"], trained["after"]
    # the critic starts as its reference: every score is 0, so the loss is log 2 and no pair is ranked
    assert before["eval_loss"] == pytest.approx(math.log(2), abs=1e-6)
    assert before["eval_pair_accuracy"] == 0.0
    assert after["eval_pair_accuracy"] >= 0.9, after
    assert after["eval_loss"] < 0.6 * math.log(2)  # measured 0.50 log 2
    assert after["eval_margin"] > 0 and after["eval_scores/chosen"] > after["eval_scores/rejected"]
    critic = SweetCritic.from_trainer(trained["trainer"])
    successes = [r for r in trained["heldout"] if r["success"]]
    rate = decisive_argmax_rate(critic, successes)
    assert rate >= 0.8, f"decisive turn has the largest advantage in only {rate:.0%} of held-out trajectories"


def test_training_logs_turn_level_metrics(trained):
    logged = [entry for entry in trained["trainer"].state.log_history if "pair_accuracy" in entry]
    assert logged, trained["trainer"].state.log_history
    for key in ("margin", "scores/chosen", "scores/rejected", "advantages/chosen", "advantages/rejected",
                "advantages/min", "advantages/max", "advantages/std", "turns/chosen", "turns/rejected",
                "num_tokens"):
        assert key in logged[-1]
    assert logged[-1]["turns/chosen"] == 3.0  # every agent turn of both trajectories is scored
    assert logged[-1]["pair_accuracy"] > logged[0]["pair_accuracy"] or logged[0]["pair_accuracy"] == 1.0
    assert trained["trainer"].data_report["train"] == {"pairs": 96, "kept": 96, "dropped": {},
                                                       "privileged_truncated": 0}


def test_inference_reproduces_the_trainer_scores(trained):
    trainer, heldout = trained["trainer"], trained["heldout"][:32]  # 16 pairs: one evaluation batch
    metrics = trainer.evaluate(eval_dataset=pairs_of(heldout))
    critic = SweetCritic.from_trainer(trainer)
    chosen = [r for r in heldout if r["success"]]
    rejected = [r for r in heldout if not r["success"]]
    chosen_scores, rejected_scores = critic.trajectory_scores(chosen), critic.trajectory_scores(rejected)
    assert statistics.mean(chosen_scores) == pytest.approx(metrics["eval_scores/chosen"], rel=1e-4)
    assert statistics.mean(rejected_scores) == pytest.approx(metrics["eval_scores/rejected"], rel=1e-4)
    accuracy = statistics.mean(c > r for c, r in zip(chosen_scores, rejected_scores))
    assert accuracy == pytest.approx(metrics["eval_pair_accuracy"])
    # per_turn_sum: a trajectory's score is the sum of its turn advantages
    for record, score in zip(chosen[:5], chosen_scores):
        assert sum(critic.advantages(record)) == pytest.approx(score, rel=1e-5, abs=1e-6)


@pytest.mark.parametrize("share_prefix", [True, False])
def test_candidates_are_scored_in_one_batch_like_full_trajectories(trained, share_prefix):
    critic = SweetCritic.from_trainer(trained["trainer"])
    critic.share_prefix = share_prefix
    record = next(r for r in trained["heldout"] if r["success"])
    turn = record["decisive_turn"]
    history = record["dialogue_history"][: 1 + 2 * turn]  # up to the human message before the decisive turn
    detail = next(d for d in DETAILS if d in record["task"]["ground_truth"])
    candidates = [decisive_question(detail), FILLERS[0], FILLERS[3], "", FILLERS[0]]  # the last one again: once
    calls = {"critic": [], "reference": []}
    hooks = [critic.model.register_forward_hook(lambda m, a, kw, out: calls["critic"].append(kw["input_ids"].shape),
                                                with_kwargs=True),
             critic.ref_model.register_forward_hook(
                 lambda m, a, kw, out: calls["reference"].append(kw["input_ids"].shape), with_kwargs=True)]
    details = critic.score_candidates(history, candidates, record["task"]["ground_truth"], return_details=True)
    for hook in hooks:
        hook.remove()
    assert details.advantages[4] == details.advantages[1] and details.num_tokens[4] == details.num_tokens[1]
    dialogues = [history + [{"role": "assistant", "content": c}] for c in candidates[:4]]
    _, inputs = critic._inputs(dialogues, record["task"]["ground_truth"], score_turns=[-1])
    scorable = [r.conversation for r in inputs if r.conversation is not None]  # not the empty message
    full_length = max(len(c) for c in scorable)
    for shapes in calls.values():
        if share_prefix:  # the shared history once, then all candidates' own tokens in one batch
            (one, prefix_length), (batch, suffix_length) = shapes
            assert one == 1 and batch == len(scorable) == 3 and prefix_length > 2 * suffix_length
            assert prefix_length + suffix_length == full_length
        else:  # all candidates in one batch: one forward of each model over the whole dialogues
            assert shapes == [(len(scorable), full_length)]
    assert details.advantages[0] == max(details.advantages[:3])  # asking about the hidden unit ranks first
    assert math.isnan(details.advantages[3]) and details.num_tokens[3] == 0  # an empty message has no token
    for candidate, advantage in zip(candidates[:3], details.advantages):
        full = critic.advantages(history + [{"role": "assistant", "content": candidate}],
                                 record["task"]["ground_truth"])
        assert full[-1] == pytest.approx(advantage, rel=1e-5, abs=1e-6)
    assert details.advantages[0] == pytest.approx(details.critic_mean_logps[0] - details.ref_mean_logps[0])


def test_a_cache_that_cannot_be_shared_falls_back_to_whole_dialogues(trained, monkeypatch):
    from transformers import DynamicCache

    critic = SweetCritic.from_trainer(trained["trainer"])
    record = next(r for r in trained["heldout"] if r["success"])
    history = record["dialogue_history"][: 1 + 2 * record["decisive_turn"]]
    candidates = [FILLERS[0], FILLERS[3]]
    shared = critic.score_candidates(history, candidates, record["task"]["ground_truth"])

    def unsupported(self, repeats):
        raise NotImplementedError("this cache cannot be repeated")

    monkeypatch.setattr(DynamicCache, "batch_repeat_interleave", unsupported)
    fallback = critic.score_candidates(history, candidates, record["task"]["ground_truth"])
    assert critic.share_prefix is False
    assert fallback == pytest.approx(shared, rel=1e-5, abs=1e-6)


def test_both_normalizations_score_the_same_turns_differently(trained):
    critic = SweetCritic.from_trainer(trained["trainer"])
    record = trained["heldout"][0]
    advantages = critic.advantages(record)
    per_turn = critic.trajectory_scores([record])[0]
    critic.score_normalization = "trajectory_mean"
    mean = critic.trajectory_scores([record])[0]
    assert per_turn == pytest.approx(sum(advantages), rel=1e-5)
    from sweet_trl.tokenization import tokenize_critic_input

    conv = tokenize_critic_input(critic.tokenizer, record["dialogue_history"], record["task"]["ground_truth"],
                                 critic.input_format).conversation
    lengths = [b - a for a, b in conv.turn_spans]
    assert len(set(lengths)) > 1  # turns of different lengths: the two scores must differ
    assert mean == pytest.approx(sum(a * n for a, n in zip(advantages, lengths)) / sum(lengths), rel=1e-5)
    assert mean != pytest.approx(per_turn, rel=1e-3)


def test_trajectory_mean_normalization_fits_its_training_pairs(tmp_path, tokenizer):
    """Twelve steps with the released implementation's score: the loss on the training pairs falls from log 2
    (measured 0.81 log 2; beta 0.1 keeps it slow), every training pair is ranked right, and the logged scores are
    the critic's trajectory-mean scores (a fit, not generalisation: one seed, no held-out set)."""
    records = collaborative_trajectories(16, seed=5, failure="no_question")
    pairs = pairs_of(records)
    trainer = SweetCriticTrainer(tiny_causal_lm(tokenizer),
                                 args=make_config(tmp_path, score_normalization="trajectory_mean", max_steps=12),
                                 train_dataset=pairs, eval_dataset=pairs, processing_class=tokenizer)
    assert trainer.evaluate()["eval_loss"] == pytest.approx(math.log(2), abs=1e-6)
    trainer.train()
    after = trainer.evaluate()
    assert after["eval_loss"] < 0.9 * math.log(2), after
    assert after["eval_pair_accuracy"] >= 0.9, after
    critic = SweetCritic.from_trainer(trainer)
    chosen = critic.trajectory_scores([r for r in records if r["success"]])
    assert statistics.mean(chosen) == pytest.approx(after["eval_scores/chosen"], rel=1e-4)


# --------------------------------------------------------------------------------------------------------------
# Bad data

def valid_pairs(n=4, seed=21):
    pairs, _ = build_critic_pairs(collaborative_trajectories(n, seed=seed))
    return pairs


def trainer_for(tmp_path, tokenizer, rows, **overrides):
    from datasets import Dataset

    return SweetCriticTrainer(tiny_causal_lm(tokenizer), args=make_config(tmp_path, **overrides),
                              train_dataset=Dataset.from_list(rows), processing_class=tokenizer)


def test_a_pair_from_two_tasks_is_an_error(tmp_path, tokenizer):
    rows = valid_pairs()
    rows[1] = {**rows[1], "rejected_task_id": rows[2]["task_id"], "rejected": rows[2]["rejected"]}
    with pytest.raises(ValueError, match="mixes two tasks"):
        trainer_for(tmp_path, tokenizer, rows)


def test_a_pair_whose_chosen_reward_is_not_higher_is_an_error(tmp_path, tokenizer):
    rows = valid_pairs()
    rows[0] = {**rows[0], "chosen_reward": 0.0, "rejected_reward": 1.0}
    with pytest.raises(ValueError, match="does not exceed"):
        trainer_for(tmp_path, tokenizer, rows)


def test_unusable_pairs_are_dropped_counted_and_logged(tmp_path, tokenizer, caplog):
    rows = valid_pairs(6)
    rows[0] = {**rows[0], "rejected": [{"role": "user", "content": "Write a unit converter."}]}  # no agent turn
    rows[1] = {**rows[1], "privileged": "def convert(value):\n" + "    value = value + 1\n" * 400}  # too long
    rows[2] = {**rows[2], "privileged": ""}
    with caplog.at_level(logging.WARNING):
        trainer = trainer_for(tmp_path, tokenizer, rows)
    report = trainer.data_report["train"]
    assert report["pairs"] == 6 and report["kept"] == 3
    assert report["dropped"] == {"rejected:no_agent_turn": 1, "chosen:too_long": 1, "no_privileged": 1}
    assert len(trainer.train_dataset) == 3
    assert "dropped 3 of 6 critic pairs" in caplog.text
    # the same long pair fits when c may be shortened, and that is counted too
    trainer = trainer_for(tmp_path, tokenizer, rows, too_long="truncate_privileged")
    assert trainer.data_report["train"]["kept"] == 4 and trainer.data_report["train"]["privileged_truncated"] == 1
    assert all(len(ids) <= 512 for ids in trainer.train_dataset["chosen_input_ids"])


def test_a_dataset_without_usable_pairs_or_columns_is_an_error(tmp_path, tokenizer):
    rows = valid_pairs(2)
    with pytest.raises(ValueError, match="no usable critic pair"):
        trainer_for(tmp_path, tokenizer, [{**row, "privileged": None} for row in rows])
    with pytest.raises(ValueError, match="lacks column"):
        trainer_for(tmp_path, tokenizer, [{k: v for k, v in row.items() if k != "privileged"} for row in rows])
    with pytest.raises(ValueError, match="list of chat messages"):
        trainer_for(tmp_path, tokenizer, [{**row, "chosen": "a plain string"} for row in rows])


def test_an_empty_dataset_is_an_error_before_trl_sees_it(tmp_path, tokenizer):
    from datasets import Dataset

    empty = Dataset.from_dict({"privileged": [], "chosen": [], "rejected": []})
    for train in (empty, Dataset.from_list([])):
        with pytest.raises(ValueError, match="no train critic pairs: the dataset is empty"):
            SweetCriticTrainer(tiny_causal_lm(tokenizer), args=make_config(tmp_path), train_dataset=train,
                               processing_class=tokenizer)
    with pytest.raises(ValueError, match="no eval critic pairs: the dataset is empty"):
        SweetCriticTrainer(tiny_causal_lm(tokenizer), args=make_config(tmp_path), processing_class=tokenizer,
                           train_dataset=Dataset.from_list(valid_pairs(2)), eval_dataset=empty)
    with pytest.raises(ValueError, match="train_dataset is required"):
        SweetCriticTrainer(tiny_causal_lm(tokenizer), args=make_config(tmp_path), processing_class=tokenizer)


def test_config_rejects_dpo_options_that_would_change_the_loss(tmp_path):
    for bad in ({"loss_type": ["ipo"]}, {"ld_alpha": 0.5}, {"use_weighting": True}, {"sync_ref_model": True}):
        with pytest.raises(ValueError, match="does not support"):
            make_config(tmp_path, **bad)
    with pytest.raises(ValueError, match="score_normalization"):
        make_config(tmp_path, score_normalization="sum")
    with pytest.raises(ValueError, match="turn_advantage_l2 must be >= 0"):
        make_config(tmp_path, turn_advantage_l2=-0.1)
    with pytest.raises(ValueError, match="too_long"):
        make_config(tmp_path, too_long="truncate")
    defaults = SweetCriticConfig(str(tmp_path), use_cpu=True)
    assert (defaults.beta, defaults.learning_rate, defaults.num_train_epochs, defaults.max_length) == (
        0.1, 2e-7, 4.0, 8192)
    assert defaults.per_device_train_batch_size == 8 and defaults.score_normalization == "per_turn_sum"


def test_real_frontend_targets_are_truncated_or_dropped_never_cut_in_the_dialogue(tmp_path, tokenizer, colbench_data):
    rows = [json.loads(line) for line in (colbench_data / "frontend_dev.jsonl").read_text().splitlines()[:3]]
    records = []
    for index, row in enumerate(rows):
        task = {**row, "task_id": f"frontend-{index}"}
        for reward, message in ((0.9, "Should the header be blue?"), (0.2, "Any edge cases?")):
            records.append({"task": task, "reward": reward, "dialogue_history": [
                {"role": "user", "content": row["problem_description"]},
                {"role": "assistant", "content": message}, {"role": "user", "content": "Okay, noted."},
                {"role": "assistant", "content": "I WANT TO ANSWER: <html><body>Hi</body></html>"}]})
    pairs, stats = build_critic_pairs(records, rule="all_pairs", require_success=False, min_reward_gap=0.1)
    assert stats.pairs == 3
    assert pairs[0]["privileged"] == rows[0]["ground_truth"]
    trainer = trainer_for(tmp_path, tokenizer, pairs, max_length=1024, too_long="truncate_privileged")
    report = trainer.data_report["train"]
    assert report["kept"] == 3 and report["privileged_truncated"] >= 1
    for ids, turns in zip(trainer.train_dataset["chosen_input_ids"], trainer.train_dataset["chosen_turn_ids"]):
        assert len(ids) <= 1024
        assert tokenizer.decode([t for t, k in zip(ids, turns) if k == 1]) == "Should the header be blue?"
    with pytest.raises(ValueError, match="no usable critic pair"):
        trainer_for(tmp_path, tokenizer, pairs, max_length=256)


# --------------------------------------------------------------------------------------------------------------
# PEFT, QLoRA, precomputed reference

def test_lora_critic_uses_the_base_model_as_reference_and_reloads(tmp_path, tokenizer):
    from peft import LoraConfig

    records = collaborative_trajectories(16, seed=31, failure="no_question")
    lora = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj", "o_proj"], task_type="CAUSAL_LM")
    base = save_tiny_model(tmp_path / "base", synthetic_corpus())  # the adapter records where its base lives
    trainer = SweetCriticTrainer(base, args=make_config(tmp_path / "lora", max_steps=4,
                                                        model_init_kwargs={"dtype": "float32"}),
                                 train_dataset=pairs_of(records), eval_dataset=pairs_of(records[:8]),
                                 processing_class=tokenizer, peft_config=lora)
    assert trainer.ref_model is None  # one model in memory: the reference is the base with adapters disabled
    assert trainer.evaluate()["eval_loss"] == pytest.approx(math.log(2), abs=1e-6)
    base_before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if "lora_" not in n}
    trainer.train()
    for name, param in trainer.model.named_parameters():
        if "lora_" not in name:
            assert torch.equal(param, base_before[name]), name
    live = SweetCritic.from_trainer(trainer).advantages(records[0])
    trainer.save_model()
    saved = tmp_path / "lora"
    assert (saved / "adapter_config.json").exists() and (saved / CRITIC_METADATA_FILE).exists()
    metadata = json.loads((saved / CRITIC_METADATA_FILE).read_text())
    assert metadata["peft"] is True and metadata["input_format"]["use_privileged"] is True
    reloaded = SweetCritic.from_pretrained(saved)
    assert reloaded.is_peft and reloaded.ref_model is None
    assert reloaded.advantages(records[0]) == pytest.approx(live, rel=1e-4, abs=1e-6)
    assert any(abs(a) > 1e-4 for a in live)
    moved = SweetCritic.from_pretrained(saved, base_model=tiny_causal_lm(tokenizer))  # same weights, given directly
    assert moved.advantages(records[0]) == pytest.approx(live, rel=1e-4, abs=1e-6)
    # Candidates scored over a shared-prefix cache, adapters on then off, match whole dialogues re-encoded.
    history = records[0]["dialogue_history"][:-2]
    candidates = [m["content"] for m in records[1]["dialogue_history"] + records[2]["dialogue_history"]
                  if m["role"] == "assistant"][:3]
    privileged = records[0]["task"]["ground_truth"]
    forwards = []
    hook = reloaded.model.register_forward_hook(lambda *_: forwards.append(1))
    shared = reloaded.score_candidates(history, candidates, privileged)
    assert len(forwards) == 4  # the prefix, then the candidates, with adapters on and off
    reloaded.share_prefix = False
    assert reloaded.score_candidates(history, candidates, privileged) == pytest.approx(shared, rel=1e-4, abs=1e-6)
    assert len(forwards) == 6
    hook.remove()
    assert len(set(shared)) == len(candidates)


def test_qlora_critic_runs_in_4bit_on_cpu_and_moves_only_its_adapter(tmp_path, tokenizer):
    """Two steps on a 4-bit NF4 base: finite loss and advantages, the LoRA weights moved, the 4-bit base did not
    (a smoke test of the QLoRA path; learning is shown with full models and LoRA elsewhere)."""
    from peft import LoraConfig
    from transformers import BitsAndBytesConfig

    path = save_tiny_model(tmp_path / "base", synthetic_corpus())
    quantization = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                      bnb_4bit_compute_dtype=torch.float32)
    lora = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj"], task_type="CAUSAL_LM")
    records = collaborative_trajectories(8, seed=41, failure="no_question")
    trainer = SweetCriticTrainer(path, args=make_config(tmp_path / "qlora", max_steps=2,
                                                        model_init_kwargs={"dtype": "float32"}),
                                 train_dataset=pairs_of(records), processing_class=tiny_tokenizer(synthetic_corpus()),
                                 quantization_config=quantization, peft_config=lora)
    import bitsandbytes as bnb

    layer = trainer.model.base_model.model.model.layers[0].self_attn.q_proj
    assert isinstance(layer.base_layer, bnb.nn.Linear4bit)
    assert trainer.ref_model is None
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    losses = [e["train_loss"] for e in trainer.state.log_history if "train_loss" in e]
    assert losses and math.isfinite(losses[0])
    moved = {n for n, p in trainer.model.named_parameters() if not torch.equal(p, before[n])}
    assert moved and all("lora_" in n for n in moved) and any("lora_B" in n for n in moved)
    advantages = SweetCritic.from_trainer(trainer).advantages(records[0])
    assert len(advantages) == 3 and all(math.isfinite(a) for a in advantages)
    assert any(abs(a) > 1e-6 for a in advantages)  # the critic differs from its reference (adapters off)


def test_precomputed_reference_gives_the_same_training(tmp_path, tokenizer):
    records = collaborative_trajectories(16, seed=51, failure="no_question")
    history = {}
    for precompute in (False, True):
        trainer = SweetCriticTrainer(tiny_causal_lm(tokenizer),
                                     args=make_config(tmp_path / str(precompute), max_steps=4, logging_steps=1,
                                                      precompute_ref_log_probs=precompute),
                                     train_dataset=pairs_of(records), processing_class=tokenizer)
        if precompute:
            assert trainer.ref_model is None  # the reference is not kept in memory
            widths = {len(v) for v in trainer.train_dataset["ref_chosen_logps"]}
            assert widths == {3}
        trainer.train()
        history[precompute] = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    assert history[True] == pytest.approx(history[False], rel=1e-4, abs=1e-6)


# --------------------------------------------------------------------------------------------------------------
# Saving, loading, model card, Hub

def test_full_critic_saves_reloads_and_pushes_with_a_sweet_model_card(trained, tmp_path, monkeypatch):
    trainer = trained["trainer"]
    output = tmp_path / "saved"
    trainer.save_model(str(output))
    for name in ("config.json", "model.safetensors", "tokenizer.json", CRITIC_METADATA_FILE, "README.md"):
        assert (output / name).exists(), name
    metadata = json.loads((output / CRITIC_METADATA_FILE).read_text())
    assert metadata["score_normalization"] == "per_turn_sum" and metadata["beta"] == 0.1
    assert metadata["paper"] == "arXiv:2503.15478"
    card = (output / "README.md").read_text()
    assert "SWEET-RL" in card and "2503.15478" in card and "sweet-rl" in card
    assert "eval_pair_accuracy" in card and "SweetCritic.from_pretrained" in card

    with pytest.raises(ValueError, match="reference model"):
        SweetCritic.from_pretrained(output)
    reloaded = SweetCritic.from_pretrained(output, ref_model=trained["initial"])
    record = trained["heldout"][1]
    assert reloaded.advantages(record) == pytest.approx(SweetCritic.from_trainer(trainer).advantages(record),
                                                         rel=1e-4, abs=1e-6)

    uploads = []

    class FakeHub:
        def create_repo(self, repo_id, **kwargs):
            return type("RepoUrl", (), {"repo_id": f"someone/{repo_id}"})()

        def upload_folder(self, repo_id, folder_path, **kwargs):
            uploads.append((repo_id, sorted(p.name for p in __import__("pathlib").Path(folder_path).iterdir())))
            return "commit"

    import transformers.trainer

    monkeypatch.setattr(transformers.trainer, "hf_api", lambda: FakeHub())
    monkeypatch.setattr(trainer, "hub_model_id", None)
    trainer.push_to_hub(commit_message="critic")
    repo_id, files = uploads[0]
    assert repo_id.startswith("someone/") and {"README.md", CRITIC_METADATA_FILE, "model.safetensors"} <= set(files)
    pushed_card = (__import__("pathlib").Path(trainer.args.output_dir) / "README.md").read_text()
    assert "2503.15478" in pushed_card and repo_id in pushed_card


def test_model_card_for_each_role_cites_the_paper():
    from sweet_trl.model_cards import sweet_model_card

    card = sweet_model_card(role="critic", model_name="tiny-critic", base_model="org/base",
                            hyperparameters={"beta": 0.1}, metrics={"eval_pair_accuracy": 0.9312754})
    text = str(card)
    assert "base_model: org/base" in text and "- sweet-rl" in text and "| 0.9313 |" in text
    assert "arxiv.org/abs/2503.15478" in text and "@article{zhou2025sweetrl" in text
    policy = str(sweet_model_card(role="policy", model_name="tiny-agent", hub_model_id="someone/tiny-agent"))
    assert "someone/tiny-agent" in policy and "2503.15478" in policy and "critic" in policy
    with pytest.raises(ValueError, match="role"):
        sweet_model_card(role="judge", model_name="x")
