"""Named breakages of the trainers, each with the tests that must fail when it is applied: a mutation check.

A learning test that passes on a broken trainer tells a researcher the method is right. Each :class:`Breakage`
below changes one thing the method depends on (by monkeypatching at the start of a pytest session, never by
editing a file) and names the tests that must catch it. ``scripts/mutation_check.py`` (``make mutation-check``)
runs those tests once unbroken and once per breakage, and fails unless every breakage turns every one of its tests
red with an assertion (an error such as a ``TypeError`` raised by the patch itself does not count), after the
breakage was actually reached (each patch counts its calls).

This module is a pytest plugin::

    PYTHONPATH=tests python -m pytest -p mutations --mutation rft_imitates_failures \\
        "tests/test_baselines.py::test_rft_raises_the_successful_turn_over_the_failed_one_on_held_out_dialogues"

With ``--mutation-report PATH`` the session writes a JSON summary: the breakage, how often its patch ran, and each
test's outcome with the type of the exception that failed it.
"""

from __future__ import annotations

import functools
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

BASELINES = "tests/test_baselines.py::"
CRITIC = "tests/test_learning_critic.py::"
MASK_TESTS = (
    BASELINES + "test_rft_trains_on_the_agent_turns_of_successful_trajectories_only",
    BASELINES + "test_multiturn_dpo_masks_cover_exactly_the_agent_turns_and_the_loss_sums_over_them",
)
RFT_LEARNS = BASELINES + "test_rft_raises_the_successful_turn_over_the_failed_one_on_held_out_dialogues"
MTDPO_LEARNS = BASELINES + "test_multiturn_dpo_prefers_asking_to_answering_early_on_held_out_tasks"
CRITIC_ACCURACY = CRITIC + "test_privileged_information_is_what_lets_the_critic_rank_held_out_pairs"
CRITIC_CREDIT = CRITIC + "test_the_decisive_turn_gets_the_credit_on_held_out_trajectories_of_4_of_5_seeds"
CHAIN = CRITIC + "test_chain_the_critic_picks_with_c_on_4_of_5_seeds_and_the_policy_follows_it_on_every_seed"
RANK_STAGE_REFERENCE = ("tests/test_critic_trainer.py::"
                        "test_the_rank_stage_measures_each_ranking_against_the_reference_it_names")
POLICY_LEARNS = "tests/test_policy_trainer.py::test_training_raises_the_margin_on_held_out_turn_pairs"
BEST_OF_N_LEARNS = "tests/test_best_of_n.py::test_the_policy_learns_the_critics_pick_not_the_rest_on_held_out_states"
SELECTORS_PICK = ("tests/test_study.py::"
                  "test_rank_selectors_pick_by_the_tests_at_random_or_with_the_untrained_critic")
FAIR_ROUNDS = "tests/test_fair_study.py::test_every_arm_spends_the_same_rounds_episodes_and_gradient_steps"

hits: dict[str, int] = {}


def counted(name: str, function: Callable) -> Callable:
    """``function``, counting its calls under ``name`` (a breakage that is never reached proves nothing)."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        hits[name] = hits.get(name, 0) + 1
        return function(*args, **kwargs)

    return wrapper


@dataclass(frozen=True)
class Breakage:
    """One way to get the method wrong.

    Attributes:
        name: identifier, given to ``--mutation``.
        what: what is broken, in a line (printed in the check's table).
        tests: pytest node ids (from the repository root) that must fail while it is applied.
        apply: patches the code with a ``pytest.MonkeyPatch``; every replacement goes through :func:`counted`.
    """

    name: str
    what: str
    tests: tuple[str, ...]
    apply: Callable[[pytest.MonkeyPatch], None]


# ---------------------------------------------------------------------------------------------------------------
# The breakages

def _mtdpo_rejected_unscored(mp: pytest.MonkeyPatch) -> None:
    from sweet_trl.baselines.multiturn_dpo import DataCollatorForMultiTurnPreference

    original = DataCollatorForMultiTurnPreference.__call__

    def call(self, examples):
        batch = original(self, examples)
        batch["completion_mask"][len(examples):] = 0  # rows after the chosen ones are the rejected dialogues
        return batch

    mp.setattr(DataCollatorForMultiTurnPreference, "__call__", counted("mtdpo_rejected_unscored", call))


def _rft_imitates_failures(mp: pytest.MonkeyPatch) -> None:
    from sweet_trl.baselines import rejection_finetuning

    mp.setattr(rejection_finetuning, "keep_for_rft", counted("rft_imitates_failures", lambda record, config: True))


def _critic_reference_given_c(mp: pytest.MonkeyPatch) -> None:
    from sweet_trl.critic import SweetCritic

    original = SweetCritic.score_candidates

    def score_candidates(self, history, candidates, privileged, **kwargs):
        kwargs["reference_without_privileged"] = False
        return original(self, history, candidates, privileged, **kwargs)

    mp.setattr(SweetCritic, "score_candidates", counted("critic_reference_given_c", score_candidates))


def _critic_without_c(mp: pytest.MonkeyPatch) -> None:
    from sweet_trl import tokenization

    def critic_messages(dialogue, privileged, fmt=None):
        return tokenization.conversation_messages(dialogue)

    mp.setattr(tokenization, "critic_messages", counted("critic_without_c", critic_messages))


def _advantage_sign_flipped(mp: pytest.MonkeyPatch) -> None:
    from sweet_trl import losses

    original = losses.turn_advantages
    mp.setattr(losses, "turn_advantages", counted("advantage_sign_flipped", lambda *args: -original(*args)))


def _ranking_sign_flipped(mp: pytest.MonkeyPatch) -> None:
    from sweet_trl import losses

    original = losses.candidate_ranking_scores
    mp.setattr(losses, "candidate_ranking_scores",
               counted("ranking_sign_flipped", lambda *args, **kwargs: -original(*args, **kwargs)))


def _turn_pairs_ignore_scores(mp: pytest.MonkeyPatch) -> None:
    from sweet_trl import turn_pairs

    original = turn_pairs.draw_pairs

    def draw_pairs(scores, texts, pairs_per_turn, rng, min_score_gap=0.0):
        shuffled = random.Random(" ".join(texts)).sample(list(scores), len(scores))  # the same scores, any order
        return original(shuffled, texts, pairs_per_turn, rng, min_score_gap)

    mp.setattr(turn_pairs, "draw_pairs", counted("turn_pairs_ignore_scores", draw_pairs))


def _best_of_n_ignores_scores(mp: pytest.MonkeyPatch) -> None:
    from sweet_trl import best_of_n

    def best_candidate(scores):
        scores = list(scores)
        return random.Random(repr(scores)).randrange(len(scores))  # any candidate, whatever its score

    mp.setattr(best_of_n, "best_candidate", counted("best_of_n_ignores_scores", best_candidate))


def _dpo_chosen_rejected_swapped(mp: pytest.MonkeyPatch) -> None:
    from sweet_trl.baselines.multiturn_dpo import MultiTurnDPOTrainer
    from sweet_trl.policy_trainer import TurnPreferenceTrainer

    def swap(dataset):
        return dataset.rename_column("chosen", "_chosen").rename_column("rejected", "chosen").rename_column(
            "_chosen", "rejected")

    for trainer_class in (TurnPreferenceTrainer, MultiTurnDPOTrainer):
        original = trainer_class._prepare_dataset

        def prepare(self, dataset, processing_class, args, dataset_name, _original=original):
            if {"chosen", "rejected"} <= set(dataset.column_names or []):  # not yet tokenised
                dataset = swap(dataset)
            return _original(self, dataset, processing_class, args, dataset_name)

        mp.setattr(trainer_class, "_prepare_dataset", counted("dpo_chosen_rejected_swapped", prepare))


def _human_tokens_in_loss_mask(mp: pytest.MonkeyPatch) -> None:
    from sweet_trl import tokenization
    from sweet_trl.baselines import multiturn_dpo, rejection_finetuning

    original = tokenization.tokenize_conversation

    def tokenize_conversation(tokenizer, messages, **kwargs):
        conversation = original(tokenizer, messages, **kwargs)
        ids = conversation.input_ids
        full = tokenization.render(tokenizer, messages)
        if tokenizer.decode(ids) != full:
            raise RuntimeError("the breakage cannot map tokens to characters for this tokenizer")
        human, cursor = [], 0  # character spans of the human's messages in the rendered conversation
        for message in messages:
            if message["role"] == "user":
                start = full.index(message["content"], cursor)
                cursor = start + len(message["content"])
                human.append((start, cursor))
        turn_ids, current, end = [], 1, 0
        for index, turn in enumerate(conversation.turn_ids):
            start, end = end, len(tokenizer.decode(ids[: index + 1]))
            current = turn or current
            in_human = any(start < b and a < end for a, b in human)
            turn_ids.append(turn or (current if in_human else 0))  # a reply counts in the agent turn before it
        return tokenization.TokenizedConversation(ids, turn_ids, conversation.turn_spans, conversation.agent_turns)

    patched = counted("human_tokens_in_loss_mask", tokenize_conversation)
    for module in (rejection_finetuning, multiturn_dpo):
        mp.setattr(module, "tokenize_conversation", patched)


def _critic_without_turn_penalty(mp: pytest.MonkeyPatch) -> None:
    from sweet_trl.critic_trainer import SweetCriticTrainer

    original = SweetCriticTrainer.__init__

    def init(self, *args, **kwargs):
        kwargs["turn_advantage_l2"] = 0.0
        original(self, *args, **kwargs)

    mp.setattr(SweetCriticTrainer, "__init__", counted("critic_without_turn_penalty", init))


def _ranking_reference_switch_inverted(mp: pytest.MonkeyPatch) -> None:
    from sweet_trl import turn_pairs

    original = turn_pairs.as_candidate_scorer

    def as_candidate_scorer(critic, ranking="critic_minus_policy_logprob"):
        if not hasattr(critic, "score_candidates"):
            return original(critic, ranking)
        # the rows keep the configured ranking's name; the scorer measures against the other reference
        inverted = ("critic_advantage" if ranking == "critic_minus_reference_without_c"
                    else "critic_minus_reference_without_c")
        return original(critic, inverted)

    mp.setattr(turn_pairs, "as_candidate_scorer", counted("ranking_reference_switch_inverted", as_candidate_scorer))


def _turn_dpo_weights_swapped(mp: pytest.MonkeyPatch) -> None:
    from sweet_trl import policy_config

    original = policy_config.with_nll_term

    def with_nll_term(loss_type, loss_weights, nll_coef):
        listed = "sft" in ([loss_type] if isinstance(loss_type, str) else list(loss_type))
        types, weights = original(loss_type, loss_weights, nll_coef)
        if listed or weights is None:  # already made (a configuration read back): as it was
            return types, weights
        sft, dpo = types.index("sft"), next(i for i, name in enumerate(types) if name != "sft")
        weights = list(weights)
        weights[sft], weights[dpo] = weights[dpo], weights[sft]  # DPO at the NLL's 0.01, the NLL at DPO's 1
        return types, weights

    mp.setattr(policy_config, "with_nll_term", counted("turn_dpo_weights_swapped", with_nll_term))


def _policy_prompt_shows_c(mp: pytest.MonkeyPatch) -> None:
    from sweet_trl import turn_pairs

    original = turn_pairs.turn_states_from_records

    def turn_states_from_records(records, config):
        states, stats = original(records, config)
        for state in states:  # c appended to the policy's instructions at every turn state
            system, *rest = state["prompt"]
            state["prompt"] = [{**system, "content": f"{system['content']}\n{state['privileged']}"}, *rest]
        return states, stats

    mp.setattr(turn_pairs, "turn_states_from_records", counted("policy_prompt_shows_c", turn_states_from_records))


def _true_reward_selector_inverted(mp: pytest.MonkeyPatch) -> None:
    from sweet_trl import selectors

    original = selectors.true_reward_scorer

    def true_reward_scorer(*args, **kwargs):
        scorer = original(*args, **kwargs)

        def score(dialogue, candidates, privileged):
            return [(-value, reference) for value, reference in scorer(dialogue, candidates, privileged)]

        score.name = scorer.name
        return score

    mp.setattr(selectors, "true_reward_scorer", counted("true_reward_selector_inverted", true_reward_scorer))


def _fair_rounds_from_the_start(mp: pytest.MonkeyPatch) -> None:
    from sweet_trl.study.fair.runner import FairStudy

    original = FairStudy.round

    def round_(self, arm, round_index, policy):
        start = self.stage_options("collect", [])[0].policy_model  # every round from the start, not the last round
        return original(self, arm, round_index, start)

    mp.setattr(FairStudy, "round", counted("fair_rounds_from_the_start", round_))


BREAKAGES = {b.name: b for b in (
    Breakage("mtdpo_rejected_unscored", "multi-turn DPO: the rejected dialogue's mask all zeros (never scored)",
             (MTDPO_LEARNS,), _mtdpo_rejected_unscored),
    Breakage("rft_imitates_failures", "rejection fine-tuning keeps every trajectory (no success filter)",
             (RFT_LEARNS,), _rft_imitates_failures),
    Breakage("critic_reference_given_c", "ranking critic_minus_reference_without_c: the reference is given c",
             ("tests/test_critic_trainer.py::test_critic_and_reference_scores_are_log_softmax_gathers",),
             _critic_reference_given_c),
    Breakage("critic_without_c", "the critic (and its reference) never given c",
             (CRITIC_ACCURACY, CHAIN), _critic_without_c),
    Breakage("advantage_sign_flipped", "losses.turn_advantages is log pi_ref - log pi_critic",
             ("tests/test_losses.py::test_turn_advantage_is_the_mean_log_ratio_of_the_turn", CHAIN),
             _advantage_sign_flipped),
    Breakage("ranking_sign_flipped", "candidates ranked lowest score first",
             ("tests/test_losses.py::test_candidate_ranking_scores", CHAIN), _ranking_sign_flipped),
    Breakage("turn_pairs_ignore_scores", "turn pairs drawn with the critic's scores shuffled among candidates",
             (CHAIN,), _turn_pairs_ignore_scores),
    Breakage("best_of_n_ignores_scores", "best-of-N fine-tuning on a random candidate, not the critic's top",
             (BEST_OF_N_LEARNS,), _best_of_n_ignores_scores),
    Breakage("dpo_chosen_rejected_swapped", "DPO trainers (turn-level and multi-turn) given chosen as rejected",
             (CHAIN, MTDPO_LEARNS), _dpo_chosen_rejected_swapped),
    Breakage("human_tokens_in_loss_mask", "RFT and multi-turn DPO masks cover the human's replies too",
             MASK_TESTS, _human_tokens_in_loss_mask),
    Breakage("critic_without_turn_penalty", "the critic trained without turn_advantage_l2 (the tests set 0.1)",
             (CRITIC_CREDIT,), _critic_without_turn_penalty),
    Breakage("ranking_reference_switch_inverted",
             "the rank stage's scorer measures critic_minus_reference_without_c against the reference given c "
             "(and the other rankings against the one without c); the rows keep the configured name",
             (RANK_STAGE_REFERENCE,), _ranking_reference_switch_inverted),
    Breakage("turn_dpo_weights_swapped", "turn-level DPO at weight 0.01 and the chosen turn's NLL at 1 "
             "(fine-tuning on the chosen turn, not DPO)", (POLICY_LEARNS,), _turn_dpo_weights_swapped),
    Breakage("policy_prompt_shows_c", "the policy's turn-state prompts carry c (train and held-out pairs alike)",
             (CHAIN,), _policy_prompt_shows_c),
    Breakage("true_reward_selector_inverted", "the true-reward selector puts the answer that passes fewest tests first",
             (SELECTORS_PICK,), _true_reward_selector_inverted),
    Breakage("fair_rounds_from_the_start", "the fair study trains every round from the start policy, not the "
             "arm's last one (rounds that are not on-policy)", (FAIR_ROUNDS,), _fair_rounds_from_the_start),
)}


# ---------------------------------------------------------------------------------------------------------------
# The plugin

def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("mutations", "apply a named breakage of the trainers (tests/mutations.py)")
    group.addoption("--mutation", choices=sorted(BREAKAGES), help="the breakage to apply for the whole session")
    group.addoption("--mutation-report", help="write the session's outcome per test to this JSON file")


def pytest_configure(config: pytest.Config) -> None:
    config._mutation_outcomes = {}
    name = config.getoption("mutation")
    if name:
        config._mutation_patch = pytest.MonkeyPatch()
        BREAKAGES[name].apply(config._mutation_patch)


def pytest_report_header(config: pytest.Config) -> str | None:
    name = config.getoption("mutation")
    return f"mutation: {name} ({BREAKAGES[name].what})" if name else None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    outcomes = item.config._mutation_outcomes
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        error = call.excinfo.typename if call.excinfo is not None else None
        outcomes[item.nodeid] = {"outcome": report.outcome, "when": report.when, "exception": error,
                                 "message": str(call.excinfo.value)[:300] if call.excinfo is not None else None}


def pytest_unconfigure(config: pytest.Config) -> None:
    patch = getattr(config, "_mutation_patch", None)
    if patch is not None:
        patch.undo()
    path = config.getoption("mutation_report", None)
    if path:
        name = config.getoption("mutation")
        Path(path).write_text(json.dumps({"mutation": name, "hits": hits.get(name, 0) if name else None,
                                          "tests": getattr(config, "_mutation_outcomes", {})}, indent=2))
