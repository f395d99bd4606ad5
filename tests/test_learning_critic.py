"""What the SWEET-RL critic learns where the privileged information c is needed, over five seeds.

Setting (``failure="wrong_detail"``): each task hides a unit in its ground truth c; the successful trajectory asks
about that unit, the failed one about another unit, at the same turn, with the same other turns. Only a critic
that reads c can tell them apart. Every seed draws its own training and held-out tasks from disjoint pools
(requests, fillers, answers, privileged texts: ``helpers_learning``), its own model initialisation and data order;
``assert_held_out`` checks that nothing held out was trained on.

One module fixture holds, per seed, a critic with c and the same critic without c (TRAINING below), each trained
the first time a test reads it. Every claim is asserted on every seed, as soon as that seed is measured:

- held-out pair accuracy with c, and its gap to the critic without c;
- credit assignment: how often the decisive turn gets the largest advantage on held-out successes and the
  lowest on held-out failures, against chance (1/3 with three agent turns);
- the chain: the critic ranks candidate questions, including the choice only c settles (which unit to ask
  about), turn pairs are built from its ranking, a policy that never sees c trains on them, and on held-out turn
  states it prefers what the critic preferred where the dialogue alone can tell.
"""

from __future__ import annotations

import statistics

import pytest

torch = pytest.importorskip("torch")
# The first test to read the critics trains ten of them (two minutes of CPU on one thread): more than the suite's
# 600 s per test where other work shares the two cores.
pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.timeout(1800)]
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


class CriticRun(dict):
    """One seed's training and held-out records (``run["train"]``, ``run["held_out"]``), and its critics, each
    trained on first use: ``run[True]`` with c, ``run[False]`` without c (``{"trainer", "metrics"}``, the metrics on
    the held-out pairs).

    Training on first use lets a test assert seed by seed, on only the critics it reads: a broken trainer fails on
    the first seed instead of after ten trainings (the mutation check, ``scripts/mutation_check.py``, runs these
    tests once per breakage)."""

    def __init__(self, seed: int, tokenizer, tmp_path_factory):
        train, held_out = split_trajectories(NUM_TRAIN_TASKS, NUM_HELD_OUT_TASKS, seed=seed, **KIND)
        self.pairs = critic_pair_dataset(train), critic_pair_dataset(held_out)
        assert_held_out(*self.pairs)
        super().__init__(seed=seed, train=train, held_out=held_out)
        self.tokenizer, self.tmp_path_factory = tokenizer, tmp_path_factory

    def __missing__(self, use_privileged: bool) -> dict:
        if use_privileged not in (True, False):
            raise KeyError(use_privileged)
        seed = self["seed"]
        trainer = SweetCriticTrainer(
            tiny_causal_lm(self.tokenizer, seed=seed),
            args=critic_config(self.tmp_path_factory.mktemp(f"critic{seed}"), seed, use_privileged),
            train_dataset=self.pairs[0], eval_dataset=self.pairs[1], processing_class=self.tokenizer,
            turn_advantage_l2=TURN_ADVANTAGE_L2)
        trainer.train()
        self[use_privileged] = {"trainer": trainer, "metrics": trainer.evaluate()}
        return self[use_privileged]


class CriticRuns(dict):
    """``critics[seed]``: that seed's :class:`CriticRun`, made on first use and kept for the module."""

    def __init__(self, tokenizer, tmp_path_factory):
        super().__init__()
        self.tokenizer, self.tmp_path_factory = tokenizer, tmp_path_factory

    def __missing__(self, seed: int) -> CriticRun:
        self[seed] = CriticRun(seed, self.tokenizer, self.tmp_path_factory)
        return self[seed]


@pytest.fixture(scope="module")
def critics(tmp_path_factory, tokenizer):
    """``critics[seed][use_privileged]``: see :class:`CriticRun`."""
    return CriticRuns(tokenizer, tmp_path_factory)


# --------------------------------------------------------------------------------------------------------------
# Asymmetric information

def test_privileged_information_is_what_lets_the_critic_rank_held_out_pairs(critics):
    """Held-out pair accuracy (the fraction of held-out pairs whose successful trajectory scores higher) with c
    against without c, on every seed: with c at least 0.85, at least 0.3 above without c, and without c at most
    0.7 (near chance: c is needed). Measured over seeds 0-4, with c: 0.979, 1.000, 1.000, 0.979, 1.000 (an AMD Zen 4
    VM), seeds 0-3 0.958, 1.000, 1.000, 0.896 (an Intel Xeon VM with AMX: the same code trains a little differently on
    another CPU's kernels); without c: 0.500, 0.438, 0.458, 0.521, 0.438 (Zen 4), 0.479, 0.438, 0.458, 0.521 (Xeon)."""
    rows = []
    for seed in SEEDS:
        run = critics[seed]
        with_c, without_c = (run[k]["metrics"]["eval_pair_accuracy"] for k in (True, False))
        rows.append((seed, round(with_c, 3), round(without_c, 3)))
        print(f"seed {seed}: held-out pair accuracy with c {with_c:.3f}, without c {without_c:.3f}")
        assert with_c >= 0.85, f"seed {seed}: with c {with_c:.3f}; seeds so far (seed, with c, without c) {rows}"
        assert with_c - without_c >= 0.3, f"seed {seed}: with c {with_c:.3f}, without c {without_c:.3f}; {rows}"
        assert without_c <= 0.7, f"seed {seed}: without c {without_c:.3f} (chance is 0.5); {rows}"
    with_c, without_c = [r[1] for r in rows], [r[2] for r in rows]
    print(f"with c {spread(with_c)}; without c {spread(without_c)}; "
          f"gap {spread([a - b for a, b in zip(with_c, without_c)])}")


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


def test_the_decisive_turn_gets_the_credit_on_held_out_trajectories_of_4_of_5_seeds(critics):
    """On held-out trajectories, the critic with c puts its largest per-turn advantage on the decisive turn of
    successes at least half the time, and its lowest on the decisive turn of failures at least half the time, each
    on 4 of the 5 seeds (chance is 1/3 for both). Measured over seeds 0-4, largest on successes: 0.896, 1.000,
    0.542, 0.833, 0.583 (an AMD Zen 4 VM), 0.875, 1.000, 0.542, 0.833, 0.396 (an Intel Xeon VM: another CPU's
    kernels train the tiny critics a little differently); lowest on failures: 0.979, 1.000, 0.562, 0.979, 0.333
    (Zen 4), 0.958, 1.000, 0.562, 0.812, 0.208 (Xeon). Seed 4's critic is the weak one on both machines."""
    rows = []
    for seed in SEEDS:
        run = critics[seed]
        top, bottom = decisive_rates(SweetCritic.from_trainer(run[True]["trainer"]), run["held_out"])
        rows.append((seed, round(top, 3), round(bottom, 3)))
        print(f"seed {seed}: decisive turn largest on successes {top:.3f}, lowest on failures {bottom:.3f}")
        for index, what in ((1, "largest on successes"), (2, "lowest on failures")):
            seeds_under = [r[0] for r in rows if r[index] < 0.5]
            assert len(seeds_under) <= len(SEEDS) - 4, (
                f"{what} under 0.5 on seeds {seeds_under}, allowed on 1 of {len(SEEDS)}; chance {CHANCE:.2f}; "
                f"(seed, largest on successes, lowest on failures) {rows}")
    print(f"largest on successes {spread([r[1] for r in rows])}; lowest on failures {spread([r[2] for r in rows])}")


# --------------------------------------------------------------------------------------------------------------
# The chain: critic ranking -> turn pairs -> policy

def hidden_unit(record) -> str:
    return next(d for d in DETAILS if f"in {d}\n" in record["task"]["ground_truth"])


def candidate_rows(states, records, fillers, seed: int) -> list[dict]:
    """Each question turn state up to the decisive one, with two candidates in a seeded order: asking about the
    task's hidden unit, and either asking about the other unit (a "unit" state: only c tells them apart) or a
    filler question from ``fillers`` (a "filler" state: the dialogue alone tells them apart), one state in two."""
    import random

    rng = random.Random(seed)
    by_episode = {r["episode_id"]: r for r in records}
    rows = []
    for state in states:
        record = by_episode[state["episode_id"]]
        if state["turn"] > record["decisive_turn"]:
            continue
        unit = hidden_unit(record)
        if rng.random() < 0.5:
            other = decisive_question(next(d for d in KIND["details"] if d != unit))
        else:
            other = rng.choice(fillers)
        candidates = rng.sample([decisive_question(unit), other], 2)
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


def assert_the_policy_sees_the_dialogue_only(pairs, records) -> None:
    """Every pair's prompt is the policy's view of its state, rebuilt here from the record and not by the stage that
    made the pairs: one instructions message shared by every state, then the dialogue before the turn; the task's
    c nowhere in it."""
    by_episode = {r["episode_id"]: r for r in records}
    instructions = {pair["prompt"][0]["content"] for pair in pairs}
    assert len(instructions) == 1 and all(p["prompt"][0]["role"] == "system" for p in pairs), (
        "the policy's instructions differ between states: something of the task is in them")
    for pair in pairs:
        record = by_episode[pair["state_id"].rsplit("/turn", 1)[0]]
        c = record["task"]["ground_truth"]
        assert not any(c in message["content"] for message in pair["prompt"]), f"c is in the prompt of {pair['state_id']}"
        agent_positions = [i for i, m in enumerate(record["dialogue_history"]) if m["role"] == "assistant"]
        dialogue = [{"role": m["role"], "content": m["content"]}
                    for m in record["dialogue_history"][:agent_positions[pair["turn"]]]]
        assert pair["prompt"][1:] == dialogue, f"the prompt of {pair['state_id']} is not its dialogue"


def is_unit_pair(pair) -> bool:
    """Both candidates ask about a unit (a "unit" state of ``candidate_rows``)."""
    return all(pair[k][0]["content"].startswith("Should the result be in") for k in ("chosen", "rejected"))


def picks_the_hidden_unit(pair, records) -> bool:
    record = next(r for r in records if r["task_id"] == pair["task_id"])
    return pair["chosen"][0]["content"] == decisive_question(hidden_unit(record))


def chosen_logps(model, tokenizer, pairs) -> list[float]:
    """log pi(chosen message | prompt), summed over the message's tokens, tokenised as the DPO trainer does."""
    from sweet_trl.policy_trainer import _message_logprobs, _prompt_and_message_ids

    model.eval()
    return _message_logprobs(model, tokenizer, [_prompt_and_message_ids(tokenizer, p["prompt"], p["chosen"])
                                                for p in pairs], torch)


def test_chain_the_critic_picks_with_c_on_4_of_5_seeds_and_the_policy_follows_it_on_every_seed(critics, tmp_path,
                                                                                                 tokenizer):
    """The critic with c ranks two candidates per turn state: the question about the task's hidden unit against
    the question about the other unit (a "unit" state: only c can settle it) or against a filler (a "filler"
    state). A policy that never sees c trains on the pairs built from the critic's ranking of training states
    (TurnPreferenceTrainer, DPO + NLL), and is measured on held-out states. Asserted: on held-out unit states the
    critic picks the hidden unit's question at least 0.8 of the time on 4 of the 5 seeds (a critic without c is at
    chance, 0.5); on every seed, on held-out filler states, the policy's log-probability of the hidden unit's
    question rises relative to the filler by more than 1 nat on average and on at least 0.9 of the states: what
    the critic's pairs taught, carried to states the policy never trained on. That is measured against the right
    question, not against the critic's held-out choice: where a weak critic picks the filler on a held-out state
    the policy rightly does not follow it (the fraction of the critic's held-out choices it raises equals the
    critic's own accuracy there, printed). Which unit to ask about is not in the policy's view, so on unit states it
    can only learn to ask about a unit (its margin there is printed, not asserted). Measured over seeds 0-4 (an
    Intel Xeon VM with AMX): critic picks the hidden unit 1.000, 1.000, 0.647, 0.929, 1.000; filler states: margin
    gain of the right question 5.29, 5.02, 5.13, 5.26, 4.24 nats, raised on 1.000 of the states on every seed; the
    critic's filler choices raised on 1.000, 1.000, 0.700, 0.850, 1.000 (its accuracy there); unit-state margin
    gain 0.21, 0.13, 0.06, -0.13, -0.20. Seed 2's critic is the weak one in every test of this module (its credit
    too)."""
    from sweet_trl.policy_config import TurnPreferenceConfig
    from sweet_trl.policy_trainer import TurnPreferenceTrainer, preference_margins

    rows, failed = [], []
    for seed in SEEDS:
        run = critics[seed]
        critic = SweetCritic.from_trainer(run[True]["trainer"])
        train_pairs = critic_turn_pairs(critic, run["train"], TRAIN_POOL["fillers"], seed, fraction=0.5)
        held_out_pairs = critic_turn_pairs(critic, run["held_out"], HELD_OUT_POOL["fillers"], seed, fraction=0.5)
        assert_held_out(run["train"], held_out_pairs)
        assert_held_out(train_pairs, held_out_pairs)
        assert_the_policy_sees_the_dialogue_only(train_pairs, run["train"])
        assert_the_policy_sees_the_dialogue_only(held_out_pairs, run["held_out"])
        unit_pairs = [p for p in held_out_pairs if is_unit_pair(p)]
        filler_pairs = [p for p in held_out_pairs if not is_unit_pair(p)]
        assert len(unit_pairs) >= 10 and len(filler_pairs) >= 10, (len(unit_pairs), len(filler_pairs))
        picks = statistics.mean(picks_the_hidden_unit(p, run["held_out"]) for p in unit_pairs)
        filler_right = statistics.mean(picks_the_hidden_unit(p, run["held_out"]) for p in filler_pairs)
        print(f"seed {seed}: the critic picks the hidden unit's question on {picks:.3f} of {len(unit_pairs)} "
              "held-out unit states")
        policy = tiny_causal_lm(tokenizer, seed=100 + seed)
        before = preference_margins(policy, tokenizer, held_out_pairs)
        config = TurnPreferenceConfig(output_dir=str(tmp_path / f"policy{seed}"), learning_rate=1e-3,
                                      per_device_train_batch_size=8, num_train_epochs=3, bf16=False,
                                      gradient_checkpointing=False, report_to="none", logging_steps=1000,
                                      save_strategy="no", use_cpu=True, max_length=512, disable_tqdm=True,
                                      seed=seed)
        trainer = TurnPreferenceTrainer(policy, args=config, train_dataset=train_pairs, processing_class=tokenizer)
        trainer.train()
        after = preference_margins(trainer.model, tokenizer, held_out_pairs)
        gains = {id(p): a - b for p, a, b in zip(held_out_pairs, after, before)}
        # the gain of the hidden unit's question over the filler: the critic's choice, or against it where it erred
        right_gains = [gains[id(p)] if picks_the_hidden_unit(p, run["held_out"]) else -gains[id(p)]
                       for p in filler_pairs]
        unit_gain = statistics.mean(gains[id(p)] for p in unit_pairs)
        filler_gain, raised = statistics.mean(right_gains), statistics.mean(g > 0 for g in right_gains)
        follows = statistics.mean(gains[id(p)] > 0 for p in filler_pairs)
        rows.append((seed, round(picks, 3), round(filler_gain, 2), round(raised, 3), round(unit_gain, 2)))
        print(f"seed {seed}: filler states: the right question's margin gain {filler_gain:.2f} nats, raised on "
              f"{raised:.3f} of {len(filler_pairs)}; the critic's choice raised on {follows:.3f} (its accuracy "
              f"{filler_right:.3f}); unit-state margin gain {unit_gain:.2f}")
        message = f"(seed, critic picks the hidden unit, filler margin gain, raised, unit margin gain) {rows}"
        assert filler_gain > 1.0, f"seed {seed}: filler-state margin gain {filler_gain:.2f}; {message}"
        assert raised >= 0.9, f"seed {seed}: filler states raised {raised:.3f}; {message}"
        failed.extend([seed] if picks < 0.8 else [])
        assert len(failed) <= len(SEEDS) - 4, (
            f"the critic picks the hidden unit on under 0.8 of unit states on seeds {failed}, at most 1 of "
            f"{len(SEEDS)} may; {message}")
    print("(seed, critic picks the hidden unit, filler-state margin gain, raised, unit-state margin gain):", rows)
