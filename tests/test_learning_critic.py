"""What the SWEET-RL critic learns where the privileged information c is needed, over five seeds.

Setting (``failure="wrong_detail"``): each task hides a unit in its ground truth c; the successful trajectory asks
about that unit, the failed one about another unit, at the same turn, with the same other turns. Only a critic
that reads c can tell them apart. Every seed draws its own training and held-out tasks from disjoint pools
(requests, fillers, answers, privileged texts: ``helpers_learning``), its own model initialisation and data order;
``assert_held_out`` checks that nothing held out was trained on.

One module fixture trains, per seed, a critic with c and the same critic without c (TRAINING below); the tests
read them:

- held-out pair accuracy with c against without c (median over seeds);
- credit assignment: how often the decisive turn gets the largest advantage on held-out successes and the
  lowest on held-out failures, against chance (1/3 with three agent turns);
- the chain: the critic ranks candidate questions, turn pairs are built from its ranking, a policy that never
  sees c trains on them, and on held-out turn states it prefers what the critic preferred.
"""

from __future__ import annotations

import statistics

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.usefixtures("one_torch_thread")
pytest.importorskip("trl")

from helpers_learning import (
    HELD_OUT_POOL,
    TRAIN_POOL,
    assert_held_out,
    learning_tokenizer,
    split_trajectories,
    spread,
)
from helpers_tiny_models import DETAILS, decisive_question, tiny_causal_lm

from sweet_trl.critic import SweetCritic
from sweet_trl.critic_config import SweetCriticConfig
from sweet_trl.critic_trainer import SweetCriticTrainer
from sweet_trl.pairs import critic_pair_dataset

SEEDS = range(5)
NUM_AGENT_TURNS = 3
CHANCE = 1 / NUM_AGENT_TURNS
# Two units: a wrong question is always about the other one. 128 training tasks (one pair each), 48 held out.
KIND = dict(failure="wrong_detail", details=DETAILS[:2], shared_context=True, num_agent_turns=NUM_AGENT_TURNS)
NUM_TRAIN_TASKS, NUM_HELD_OUT_TASKS = 128, 48
TRAINING = dict(learning_rate=5e-3, num_train_epochs=3, per_device_train_batch_size=8, lr_scheduler_type="constant")
# The per-turn regulariser (SweetCriticTrainer's turn_advantage_l2): without it the decisive turn of a held-out
# success gets the largest advantage in a median 4% of cases (chance 33%); see test_the_decisive_turn_gets_...
TURN_ADVANTAGE_L2 = 0.1


@pytest.fixture(scope="module")
def tokenizer():
    return learning_tokenizer()


def critic_config(output_dir, seed: int, use_privileged: bool) -> SweetCriticConfig:
    return SweetCriticConfig(
        output_dir=str(output_dir), per_device_eval_batch_size=32, bf16=False, use_cpu=True,
        gradient_checkpointing=False, report_to="none", save_strategy="no", logging_steps=1000, max_length=512,
        disable_tqdm=True, seed=seed, use_privileged=use_privileged, **TRAINING)


@pytest.fixture(scope="module")
def critics(tmp_path_factory, tokenizer):
    """Per seed: the training and held-out records, and the trainers of the critic with c and without c."""
    runs = []
    for seed in SEEDS:
        train, held_out = split_trajectories(NUM_TRAIN_TASKS, NUM_HELD_OUT_TASKS, seed=seed, **KIND)
        train_pairs, held_out_pairs = critic_pair_dataset(train), critic_pair_dataset(held_out)
        assert_held_out(train_pairs, held_out_pairs)
        run = {"seed": seed, "train": train, "held_out": held_out}
        for use_privileged in (True, False):
            trainer = SweetCriticTrainer(
                tiny_causal_lm(tokenizer, seed=seed),
                args=critic_config(tmp_path_factory.mktemp(f"critic{seed}"), seed, use_privileged),
                train_dataset=train_pairs, eval_dataset=held_out_pairs, processing_class=tokenizer,
                turn_advantage_l2=TURN_ADVANTAGE_L2)
            trainer.train()
            run[use_privileged] = {"trainer": trainer, "metrics": trainer.evaluate()}
        runs.append(run)
    return runs


# --------------------------------------------------------------------------------------------------------------
# Asymmetric information

def test_privileged_information_is_what_lets_the_critic_rank_held_out_pairs(critics):
    """Held-out pair accuracy (the fraction of held-out pairs whose successful trajectory scores higher) with c
    against without c, per seed. Measured over seeds 0-4, median (min-max): with c 1.00 (0.79-1.00); without c
    0.46 (0.42-0.52); their difference 0.54 (0.27-0.58). Asserted on the medians: with c >= 0.9, and at least 0.3 above without c."""
    with_c = [run[True]["metrics"]["eval_pair_accuracy"] for run in critics]
    without_c = [run[False]["metrics"]["eval_pair_accuracy"] for run in critics]
    gaps = [a - b for a, b in zip(with_c, without_c)]
    print(f"held-out pair accuracy with c {spread(with_c)} {with_c}; without c {spread(without_c)} {without_c}; "
          f"gap {spread(gaps)}")
    assert statistics.median(with_c) >= 0.9, f"with c: {spread(with_c)}; without c: {spread(without_c)}"
    assert statistics.median(gaps) >= 0.3, f"gap: {spread(gaps)}; with c {with_c}, without c {without_c}"
    assert statistics.median(without_c) <= 0.7, f"without c: {spread(without_c)}"  # near chance: c is needed


# --------------------------------------------------------------------------------------------------------------
# Credit assignment where c is needed

def decisive_rates(critic, records) -> tuple[float, float]:
    """(share of successes whose decisive turn has the largest advantage, share of failures where it has the
    lowest)."""
    advantages = critic.turn_advantages(records)
    top, bottom = [], []
    for values, record in zip(advantages, records):
        ranked = sorted(range(len(values)), key=values.__getitem__)
        (top if record["success"] else bottom).append(
            (ranked[-1] if record["success"] else ranked[0]) == record["decisive_turn"])
    return statistics.mean(top), statistics.mean(bottom)


def test_the_decisive_turn_gets_the_credit_on_held_out_trajectories(critics):
    """On held-out trajectories, the critic with c puts its largest per-turn advantage on the decisive turn of
    successes and its lowest on the decisive turn of failures, more often than chance (1/3). Measured over seeds
    0-4, median (min-max): largest on successes 0.73 (0.54-1.00), lowest on failures 0.75 (0.00-1.00). Asserted
    on the medians."""
    tops, bottoms = [], []
    for run in critics:
        critic = SweetCritic.from_trainer(run[True]["trainer"])
        top, bottom = decisive_rates(critic, run["held_out"])
        tops.append(top)
        bottoms.append(bottom)
    print(f"decisive turn largest on successes {spread(tops)} {tops}; lowest on failures {spread(bottoms)} {bottoms}")
    assert statistics.median(tops) >= 0.6, f"largest on successes: {spread(tops)}; chance {CHANCE:.2f}"
    assert statistics.median(bottoms) >= 0.6, f"lowest on failures: {spread(bottoms)}; chance {CHANCE:.2f}"


# --------------------------------------------------------------------------------------------------------------
# The chain: critic ranking -> turn pairs -> policy

def candidate_rows(states, records, fillers, seed: int) -> list[dict]:
    """Each question turn state up to the decisive one, with two candidates: asking about the task's hidden unit,
    and a filler question from ``fillers``."""
    import random

    rng = random.Random(seed)
    by_episode = {r["episode_id"]: r for r in records}
    rows = []
    for state in states:
        record = by_episode[state["episode_id"]]
        if state["turn"] > record["decisive_turn"]:
            continue
        unit = next(d for d in DETAILS if f"in {d}\n" in record["task"]["ground_truth"])
        candidates = [decisive_question(unit), rng.choice(fillers)]
        rows.append({**state, "candidates": candidates, "policy_mean_logprobs": [0.0, 0.0],
                     "candidate_num_tokens": [0, 0], "generation_errors": []})
    return rows


def critic_turn_pairs(critic, records, fillers, seed: int, fraction: float):
    """Stages 1, 3 and 4 of ``sweet_trl.turn_pairs`` (stage 2, sampling, is replaced by ``candidate_rows``) on a
    seeded ``fraction`` of the successful trajectories."""
    from sweet_trl.turn_pairs import TurnPairsConfig, build_turn_pairs, rank_candidates, select_turn_states

    config = TurnPairsConfig(state_fraction=fraction, num_candidates=2, pairs_per_turn=1,
                             ranking="critic_advantage", seed=seed)
    successes = [r for r in records if r["success"]]
    states = select_turn_states(successes, config)
    ranked = rank_candidates(candidate_rows(states, successes, fillers, seed), critic, config)
    return build_turn_pairs(ranked, config).to_list()


def chosen_logps(model, tokenizer, pairs) -> list[float]:
    """log pi(chosen message | prompt), summed over the message's tokens, tokenised as the DPO trainer does."""
    from sweet_trl.policy_trainer import _message_logprobs, _prompt_and_message_ids

    model.eval()
    return _message_logprobs(model, tokenizer, [_prompt_and_message_ids(tokenizer, p["prompt"], p["chosen"])
                                                for p in pairs], torch)


def test_a_policy_trained_on_critic_ranked_turns_prefers_the_critics_choice_on_held_out_states(critics, tmp_path,
                                                                                                 tokenizer):
    """The critic with c ranks two candidates per training turn state (ask about the hidden unit, or a filler);
    a policy that never sees c trains on the pairs built from that ranking (TurnPreferenceTrainer, DPO + NLL).
    On held-out turn states, ranked by the same critic with their own c, the policy's log-probability of the
    critic-preferred candidate rises, relative to the rejected one and to its own start. Measured over seeds
    0-4, median (min-max): margin gain 3.0 (1.0-3.9) nats, chosen log-prob gain 3.6 (2.9-4.2) nats, held-out
    pairs raised 1.00 (0.62-1.00). Asserted on the medians."""
    from sweet_trl.policy_config import TurnPreferenceConfig
    from sweet_trl.policy_trainer import TurnPreferenceTrainer, preference_margins

    margin_gains, chosen_gains, raised, agree = [], [], [], []
    for run in critics:
        seed = run["seed"]
        critic = SweetCritic.from_trainer(run[True]["trainer"])
        train_pairs = critic_turn_pairs(critic, run["train"], TRAIN_POOL["fillers"], seed, fraction=0.25)
        held_out_pairs = critic_turn_pairs(critic, run["held_out"], HELD_OUT_POOL["fillers"], seed, fraction=0.5)
        assert_held_out(run["train"], held_out_pairs)
        assert_held_out(train_pairs, held_out_pairs)
        # how often the critic preferred the question about the hidden unit (shown, not the claim)
        agree.append(statistics.mean(p["chosen"][0]["content"].startswith("Should the result be in")
                                     for p in held_out_pairs))
        policy = tiny_causal_lm(tokenizer, seed=100 + seed)
        before = preference_margins(policy, tokenizer, held_out_pairs)
        chosen_before = chosen_logps(policy, tokenizer, held_out_pairs)
        config = TurnPreferenceConfig(output_dir=str(tmp_path / f"policy{seed}"), learning_rate=1e-3,
                                      per_device_train_batch_size=8, num_train_epochs=3, bf16=False,
                                      gradient_checkpointing=False, report_to="none", logging_steps=1000,
                                      save_strategy="no", use_cpu=True, max_length=512, disable_tqdm=True,
                                      seed=seed)
        trainer = TurnPreferenceTrainer(policy, args=config, train_dataset=train_pairs, processing_class=tokenizer)
        trainer.train()
        after = preference_margins(trainer.model, tokenizer, held_out_pairs)
        chosen_after = chosen_logps(trainer.model, tokenizer, held_out_pairs)
        margin_gains.append(statistics.mean(after) - statistics.mean(before))
        chosen_gains.append(statistics.mean(chosen_after) - statistics.mean(chosen_before))
        raised.append(statistics.mean(a > b for a, b in zip(after, before)))
    message = (f"margin gain {spread(margin_gains)}; chosen log-prob gain {spread(chosen_gains)}; pairs raised "
               f"{spread(raised)}; critic chose the unit question {spread(agree)}")
    print(message, margin_gains, chosen_gains, raised, agree)
    assert statistics.median(margin_gains) > 2.0, message
    assert statistics.median(chosen_gains) > 0.0, message
    assert statistics.median(raised) >= 0.75, message
