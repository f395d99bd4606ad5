"""Turn-level preference data: turn states, candidates, critic ranking and upper-vs-lower-half pairs."""

from __future__ import annotations

import json
import math
import random

import pytest

pytest.importorskip("datasets")

from helpers_tiny_models import collaborative_trajectories

from sweet_trl.generation.base import Generation
from sweet_trl.turn_pairs import (
    TurnPairsConfig,
    build_turn_pairs,
    draw_pairs,
    env_instructions,
    rank_candidates,
    sample_candidates,
    select_turn_states,
)

BACKEND = "ColBench-Backend-v0"


def test_config_defaults_are_the_released_recipe():
    config = TurnPairsConfig()
    assert (config.state_fraction, config.num_candidates, config.pairs_per_turn) == (0.1, 16, 4)
    assert config.ranking == "critic_minus_policy_logprob" and config.temperature == 1.0
    with pytest.raises(ValueError, match="ranking"):
        TurnPairsConfig(ranking="critic")
    with pytest.raises(ValueError, match="state_fraction"):
        TurnPairsConfig(state_fraction=0.0)
    with pytest.raises(ValueError, match="num_candidates"):
        TurnPairsConfig(num_candidates=1)


def test_turn_states_are_a_seeded_fraction_of_trajectories_without_privileged_info(tmp_path):
    records = collaborative_trajectories(10, per_task=2, num_agent_turns=3)
    config = TurnPairsConfig(state_fraction=0.25, seed=0)
    states = select_turn_states(records, config, output_dir=tmp_path / "states")
    assert len(states) == 5 * 3  # 5 of 20 trajectories, every agent turn of each
    assert len({s["episode_id"] for s in states}) == 5
    again = select_turn_states(records, config)
    assert again["state_id"] == states["state_id"]
    other = select_turn_states(records, TurnPairsConfig(state_fraction=0.25, seed=1))
    assert set(other["episode_id"]) != set(states["episode_id"])

    by_episode = {r["episode_id"]: r for r in records}
    instructions = env_instructions(BACKEND, 10)
    for state in states:
        record = by_episode[state["episode_id"]]
        prompt = state["prompt"]
        assert prompt[0] == {"role": "system", "content": instructions}
        assert prompt[-1]["role"] == "user"
        assert sum(m["role"] == "assistant" for m in prompt) == state["turn"]
        agent_messages = [m["content"] for m in record["dialogue_history"] if m["role"] == "assistant"]
        assert state["original"] == agent_messages[state["turn"]]
        assert state["privileged"] == record["task"]["ground_truth"]
        assert all(state["privileged"] not in m["content"] for m in prompt)
    saved = json.loads((tmp_path / "states" / "stage_stats.json").read_text())
    assert saved["rows_out"] == 15 and saved["dropped"] == {"trajectory_not_selected": 15}


def test_turn_states_only_at_the_chosen_turns(tmp_path):
    records = collaborative_trajectories(10, per_task=2, num_agent_turns=3)
    every_turn = select_turn_states(records, TurnPairsConfig(state_fraction=0.25, seed=0))
    answers = select_turn_states(records, TurnPairsConfig(state_fraction=0.25, seed=0, state_turns=[2]),
                                 output_dir=tmp_path / "states")
    assert set(answers["turn"]) == {2} and len(answers) == 5  # the same 5 trajectories, their last turn only
    assert answers["state_id"] == [s for s, t in zip(every_turn["state_id"], every_turn["turn"]) if t == 2]
    stats = json.loads((tmp_path / "states" / "stage_stats.json").read_text())
    assert stats["dropped"] == {"trajectory_not_selected": 15, "state_turn_not_selected": 10}
    capped = select_turn_states(records, TurnPairsConfig(state_fraction=1.0, state_turns=[0, 2], max_states=7))
    assert len(capped) == 7 and set(capped["turn"]) <= {0, 2}
    with pytest.raises(ValueError, match="no turn state could be made"):
        select_turn_states(records, TurnPairsConfig(state_fraction=1.0, state_turns=[5]))
    for bad in ([], [-1], [0.5]):
        with pytest.raises(ValueError, match="state_turns"):
            TurnPairsConfig(state_turns=bad)


def test_turn_states_leave_out_unusable_trajectories_and_read_original_colbench_records():
    original = collaborative_trajectories(2, per_task=1, num_agent_turns=2)
    for record in original:  # the original ColBench format: no ids, no env, no success
        for key in ("task_id", "episode_id", "env_id", "success", "decisive_turn"):
            record.pop(key)
        record["task"].pop("task_id")
        record["task"]["test_cases"] = {"test1": "convert(1)"}
    no_privileged = collaborative_trajectories(1, task_prefix="bare")[0]
    no_privileged["task"]["ground_truth"] = ""
    infra = collaborative_trajectories(1, task_prefix="infra")[0]
    infra.update(outcome="env_error", reward=None)
    grader = collaborative_trajectories(1, task_prefix="grader")[0]
    grader["grader"] = {"infra_error": True, "status_counts": {"infra_error": 3}}
    render = collaborative_trajectories(1, task_prefix="render")[0]
    render.update(infra_error=True, reward=0.0, render_status="infra_error")  # a frontend renderer failure
    states = select_turn_states(original + [no_privileged, infra, grader, render],
                                TurnPairsConfig(state_fraction=1.0))
    assert len(states) == 2 * 2
    assert set(states["env_id"]) == {BACKEND}
    assert all(s["prompt"][0]["content"] == env_instructions(BACKEND) for s in states)
    with pytest.raises(ValueError, match="no turn state"):
        select_turn_states([infra, grader, render], TurnPairsConfig(state_fraction=1.0))


def test_infra_drop_reason_agrees_with_has_infra_error():
    from sweet_trl.trajectories import Trajectory, has_infra_error

    cases = [
        ({"infra_error": True, "reward": 0.0}, "render_infra_error"),
        ({"infra_error": False, "reward": 0.0}, None),
        ({"grader": {"infra_error": True}, "reward": 0.0}, "grader_infra_error"),
        ({"grader": {"infra_error": False}, "reward": 1.0}, None),
        ({"outcome": "policy_error", "reward": None}, "infra_failure"),
        ({"outcome": "env_error", "reward": None, "infra_error": True}, "infra_failure"),
        ({"outcome": "answered", "reward": 1.0, "grader": "not a mapping"}, None),
    ]
    for record, reason in cases:
        assert Trajectory(record).infra_drop_reason == reason
        assert (reason is not None) == has_infra_error(record)


# ---------------------------------------------------------------------------------------------------------------
# Pair drawing on hand-made scores

def test_pairs_are_upper_half_against_lower_half_seeded_and_distinct():
    scores = [float(v) for v in random.Random(5).sample(range(100), 16)]
    texts = [f"candidate {i}" for i in range(16)]
    ranked = sorted(range(16), key=lambda i: -scores[i])
    upper, lower = set(ranked[:8]), set(ranked[8:])
    draws = set()
    for seed in range(30):
        pairs = draw_pairs(scores, texts, 4, random.Random(seed))
        assert len(pairs) == 4 and len(set(pairs)) == 4
        assert all(c in upper and r in lower for c, r in pairs)
        assert pairs == draw_pairs(scores, texts, 4, random.Random(seed))  # seeded
        draws.add(tuple(pairs))
    assert len(draws) > 20  # different seeds draw different pairs


def test_pair_drawing_edge_cases():
    rng = random.Random(0)
    # odd count: the median candidate (score 3) is in neither half
    pairs = draw_pairs([5.0, 1.0, 3.0, 4.0, 2.0], list("abcde"), 10, rng)
    assert sorted(pairs) == [(0, 1), (0, 4), (3, 1), (3, 4)]
    # equal texts never pair; scores no more than min_score_gap apart never pair
    assert draw_pairs([2.0, 1.0], ["same", "same"], 4, rng) == []
    assert draw_pairs([2.0, 1.5, 1.0, 0.0], list("abcd"), 4, rng, min_score_gap=1.5) == [(0, 3)]
    # candidates the critic could not score take no part
    assert sorted(draw_pairs([3.0, math.nan, 2.0, 1.0, 0.0], list("abcde"), 4, rng)) == [(0, 3), (0, 4), (2, 3),
                                                                                          (2, 4)]
    assert draw_pairs([1.0, 0.0], ["a", "b"], 4, rng) == [(0, 1)]


# ---------------------------------------------------------------------------------------------------------------
# Ranking: both modes, with a hand-made critic

CRITIC = [-1.0, -1.2, -0.8, -1.1, -2.0, -2.2, -1.9, -2.1]
POLICY = [-3.0, -3.1, -2.9, -3.2, -0.5, -0.4, -0.6, -0.3]     # critic - policy: candidates 0-3 on top
REFERENCE = [-0.5, -0.6, -0.4, -0.7, -3.0, -3.1, -2.9, -3.3]  # critic - reference: candidates 4-7 on top


def candidate_rows():
    prompt = [{"role": "system", "content": "instructions"}, {"role": "user", "content": "Write a converter."}]
    return [{"state_id": "ep/turn0", "episode_id": "ep", "task_id": "t", "env_id": BACKEND, "turn": 0,
             "prompt": prompt, "privileged": "def convert(x): return x", "original": "Hi",
             "trajectory_reward": 1.0, "candidates": [f"question {i}" for i in range(8)],
             "policy_mean_logprobs": POLICY, "candidate_num_tokens": [3] * 8, "generation_errors": []}]


def fake_critic(calls):
    def scorer(dialogue, candidates, privileged):
        calls.append((dialogue, candidates, privileged))
        return [(CRITIC[int(c.split()[-1])], REFERENCE[int(c.split()[-1])]) for c in candidates]
    return scorer


@pytest.mark.parametrize("ranking, top", [("critic_minus_policy_logprob", {0, 1, 2, 3}),
                                          ("critic_advantage", {4, 5, 6, 7}),
                                          ("critic_minus_reference_without_c", {4, 5, 6, 7})])
def test_both_rankings_on_hand_made_scores(tmp_path, ranking, top):
    calls = []
    config = TurnPairsConfig(ranking=ranking, seed=3)
    ranked = rank_candidates(candidate_rows(), fake_critic(calls), config, output_dir=tmp_path / "ranked")
    (dialogue, _candidates, privileged), = calls
    assert dialogue == [{"role": "user", "content": "Write a converter."}]  # the critic's view: no instructions
    assert privileged == "def convert(x): return x"
    row = ranked[0]
    reference = POLICY if ranking == "critic_minus_policy_logprob" else REFERENCE
    assert row["ranking_scores"] == pytest.approx([c - r for c, r in zip(CRITIC, reference)])
    assert row["advantages"] == pytest.approx([c - r for c, r in zip(CRITIC, REFERENCE)])
    # the pairs stage is configured apart from the rank stage: the label comes with the ranked rows
    pairs = build_turn_pairs(tmp_path / "ranked", TurnPairsConfig(seed=3), output_dir=tmp_path / "pairs")
    assert len(pairs) == 4
    assert set(pairs["ranking"]) == {ranking}
    for pair in pairs:
        chosen = int(pair["chosen"][0]["content"].split()[-1])
        rejected = int(pair["rejected"][0]["content"].split()[-1])
        assert chosen in top and rejected not in top
        assert pair["chosen"][0]["role"] == pair["rejected"][0]["role"] == "assistant"
        assert pair["prompt"] == candidate_rows()[0]["prompt"] and pair["chosen_score"] > pair["rejected_score"]
    assert json.loads((tmp_path / "pairs" / "stage_stats.json").read_text())["rows_out"] == 4


def test_a_ranking_rule_is_one_entry_of_the_rules_table(tmp_path, monkeypatch):
    """RANKING_RULES is where a ranking is defined: a new entry is taken by the config and ranks by its baseline, and
    a critic is asked for its reference without c exactly when the rule's baseline does not read c."""
    from types import SimpleNamespace

    from sweet_trl import losses
    from sweet_trl.turn_pairs import as_candidate_scorer

    monkeypatch.setitem(losses.RANKING_RULES, "critic_over_its_reference", losses.RankingRule("reference", True))
    ranked = rank_candidates(candidate_rows(), fake_critic([]), TurnPairsConfig(ranking="critic_over_its_reference"))
    assert ranked[0]["ranking_scores"] == pytest.approx([c - r for c, r in zip(CRITIC, REFERENCE)])
    with pytest.raises(ValueError, match="unknown ranking 'nonesuch'.*critic_over_its_reference"):
        TurnPairsConfig(ranking="nonesuch")

    asked = []

    def score_candidates(dialogue, candidates, privileged, return_details, reference_without_privileged=False):
        asked.append(reference_without_privileged)
        return SimpleNamespace(critic_mean_logps=[0.0] * len(candidates), ref_mean_logps=[0.0] * len(candidates))

    critic = SimpleNamespace(score_candidates=score_candidates, name="critic")
    for ranking in losses.RANKING_RULES:
        as_candidate_scorer(critic, ranking)([], ["a", "b"], "c")
    # critic_minus_policy_logprob, critic_advantage, critic_minus_reference_without_c, the rule added above
    assert list(losses.RANKING_RULES)[:3] == list(losses.RANKING_MODES)
    assert asked == [False, False, True, False]


def test_pairs_only_from_the_chosen_turns(tmp_path):
    ranked = rank_candidates(candidate_rows(), fake_critic([]), TurnPairsConfig(seed=3))
    answer_turn = {**ranked[0], "state_id": "ep/turn1", "turn": 1}
    rows = [ranked[0], answer_turn]
    assert set(build_turn_pairs(rows, TurnPairsConfig(seed=3))["turn"]) == {0, 1}
    pairs = build_turn_pairs(rows, TurnPairsConfig(seed=3, turns=[1]), output_dir=tmp_path / "pairs")
    assert set(pairs["state_id"]) == {"ep/turn1"} and len(pairs) == 4
    stats = json.loads((tmp_path / "pairs" / "stage_stats.json").read_text())
    assert stats["dropped"] == {"state_turn_not_trained": 1}
    with pytest.raises(ValueError, match="no turn-level pair"):
        build_turn_pairs(rows, TurnPairsConfig(turns=[2]))
    for bad in ([], [-1], [0.5]):
        with pytest.raises(ValueError, match="turns"):
            TurnPairsConfig(turns=bad)


def test_ranking_failures_are_recorded_not_raised():
    rows = candidate_rows() + [{**candidate_rows()[0], "state_id": "ep/turn1", "candidates": ["only one"],
                                "policy_mean_logprobs": [-1.0]}]

    def broken(dialogue, candidates, privileged):
        raise RuntimeError("CUDA out of memory")

    ranked = rank_candidates(rows, broken, TurnPairsConfig())
    assert ranked[0]["ranking_error"] == "RuntimeError: CUDA out of memory"
    assert ranked[1]["ranking_error"] is None and ranked[1]["ranking_scores"] == []
    with pytest.raises(ValueError, match="no turn-level pair"):
        build_turn_pairs(ranked, TurnPairsConfig())
    # ranking by the advantage needs the critic's reference
    no_reference = rank_candidates(candidate_rows(), lambda d, c, p: [(-1.0, None)] * len(c),
                                   TurnPairsConfig(ranking="critic_advantage"))
    assert "needs the reference mean log-probability" in no_reference[0]["ranking_error"]


# ---------------------------------------------------------------------------------------------------------------
# Candidate sampling

class ScriptedBackend:
    """Replies ``"<state text> #j"`` with log-probs ``[-j, -j - 1]``; sample 1 fails, sample 2 is empty."""

    name = "scripted"

    def __init__(self, fail_after_calls: int | None = None):
        self.calls = []
        self.fail_after_calls = fail_after_calls

    def generate(self, histories, n=1, sampling=None, seeds=None):
        if self.fail_after_calls is not None and len(self.calls) >= self.fail_after_calls:
            raise RuntimeError("the server went away")
        self.calls.append((histories, n, sampling, seeds))
        out = []
        for history in histories:
            samples = []
            for j in range(n):
                if j == 1:
                    samples.append(Generation.failed("timeout"))
                elif j == 2:
                    samples.append(Generation(text="  ", token_ids=[1], logprobs=[-0.1]))
                else:
                    samples.append(Generation(text=f"{history[-1]['content']} #{j}", token_ids=[7, 8],
                                              logprobs=[-float(j), -float(j) - 1]))
            out.append(samples)
        return out


def test_sampling_keeps_good_candidates_records_failures_and_resumes(tmp_path):
    states = select_turn_states(collaborative_trajectories(4, per_task=1, num_agent_turns=3),
                                TurnPairsConfig(state_fraction=1.0))
    config = TurnPairsConfig(num_candidates=5, generation_batch_size=4, temperature=0.7, max_new_tokens=64)
    output = tmp_path / "candidates"
    with pytest.raises(RuntimeError, match="went away"):
        sample_candidates(states, ScriptedBackend(fail_after_calls=2), config, output_dir=output)
    partial = tmp_path / "candidates.partial.jsonl"
    assert len(partial.read_text().splitlines()) == 1 + 8  # what made them, then two finished batches

    backend = ScriptedBackend()
    rows = sample_candidates(states, backend, config, output_dir=output)
    assert sum(len(h) for h, *_ in backend.calls) == len(states) - 8  # only the missing states
    assert not partial.exists() and len(rows) == len(states) == 12
    _histories, n, sampling, _seeds = backend.calls[0]
    assert n == 5 and sampling.temperature == 0.7 and sampling.max_new_tokens == 64 and sampling.logprobs
    for row in rows:
        assert len(row["candidates"]) == 3
        assert row["policy_mean_logprobs"] == [-0.5, -3.5, -4.5]
        assert row["generation_errors"] == ["timeout", "empty candidate"]
        assert row["candidates"][0].startswith(row["prompt"][-1]["content"])


class TaggedBackend(ScriptedBackend):
    """A :class:`ScriptedBackend` under another name whose candidates say so."""

    def __init__(self, name: str, fail_after_calls: int | None = None):
        super().__init__(fail_after_calls)
        self.name = name

    def generate(self, histories, n=1, sampling=None, seeds=None):
        out = super().generate(histories, n, sampling, seeds)
        for samples in out:
            for generation in samples:
                if generation.text.strip():
                    generation.text = f"{self.name}: {generation.text}"
        return out


def test_resuming_sampling_never_mixes_rows_of_another_call(tmp_path, caplog):
    states = select_turn_states(collaborative_trajectories(3, per_task=1, num_agent_turns=2),
                                TurnPairsConfig(state_fraction=1.0))
    config = TurnPairsConfig(num_candidates=4, generation_batch_size=2)
    output, partial = tmp_path / "candidates", tmp_path / "candidates.partial.jsonl"

    def interrupted(backend_name: str, run_config: TurnPairsConfig) -> None:
        with pytest.raises(RuntimeError, match="went away"):
            sample_candidates(states, TaggedBackend(backend_name, fail_after_calls=2), run_config, output_dir=output)
        assert len(partial.read_text().splitlines()) == 1 + 4

    # another number of candidates and another backend: the saved rows are discarded, with a warning
    interrupted("first", config)
    other = TurnPairsConfig(num_candidates=8, generation_batch_size=2, temperature=0.3)
    second = TaggedBackend("second")
    with caplog.at_level("WARNING", logger="sweet_trl.turn_pairs"):
        rows = sample_candidates(states, second, other, output_dir=output)
    assert "discarding" in caplog.text and "num_candidates: 4 -> 8" in caplog.text and "'first' -> 'second'" in (
        caplog.text)
    assert sum(len(h) for h, *_ in second.calls) == len(states) == 6  # every state sampled again
    assert {len(c) for c in rows["candidates"]} == {6} and not partial.exists()  # 8 samples, 2 of them fail
    assert all(c.startswith("second: ") for row in rows["candidates"] for c in row)

    # the same call resumes; a state whose input row changed is sampled again
    interrupted("first", config)
    changed = states.map(lambda s: {"prompt": s["prompt"][:-1] + [{"role": "user", "content": "Changed."}]}
                         if s["state_id"] == states[0]["state_id"] else {})
    again = TaggedBackend("first")
    rows = sample_candidates(changed, again, config, output_dir=output)
    assert [len(h) for h, *_ in again.calls] == [2, 1]  # the two states never sampled, then the changed one
    assert rows[0]["candidates"][0] == "first: Changed. #0" and {len(c) for c in rows["candidates"]} == {2}

    # a partial file that does not say what wrote it is not trusted
    partial.write_text(json.dumps({**states[0], "candidates": ["stale"] * 2}) + "\n")
    with caplog.at_level("WARNING", logger="sweet_trl.turn_pairs"):
        rows = sample_candidates(states, TaggedBackend("first"), config, output_dir=output)
    assert "does not say which call wrote it" in caplog.text and "stale" not in rows[0]["candidates"]


def test_resuming_ranking_needs_the_same_critic_and_ranking(tmp_path, caplog):
    rows = [{**candidate_rows()[0], "state_id": f"ep/turn{i}"} for i in range(3)]
    output = tmp_path / "ranked"

    def interrupting(calls, stop_after):
        scorer = fake_critic(calls)

        def score(dialogue, candidates, privileged):
            if len(calls) >= stop_after:
                raise KeyboardInterrupt
            return scorer(dialogue, candidates, privileged)
        return score

    config = TurnPairsConfig(scoring_batch_size=1)
    with pytest.raises(KeyboardInterrupt):
        rank_candidates(rows, interrupting([], 2), config, output_dir=output, critic_name="critic-a")
    calls = []
    ranked = rank_candidates(rows, fake_critic(calls), config, output_dir=output, critic_name="critic-a")
    assert len(calls) == 1 and len(ranked) == 3  # resumed: only the last state scored

    with pytest.raises(KeyboardInterrupt):
        rank_candidates(rows, interrupting([], 2), config, output_dir=output, critic_name="critic-a")
    calls = []
    advantage = TurnPairsConfig(scoring_batch_size=1, ranking="critic_advantage")
    with caplog.at_level("WARNING", logger="sweet_trl.turn_pairs"):
        ranked = rank_candidates(rows, fake_critic(calls), advantage, output_dir=output, critic_name="critic-b")
    assert len(calls) == 3 and "critic: 'critic-a' -> 'critic-b'" in caplog.text
    expected = [c - r for c, r in zip(CRITIC, REFERENCE)]
    assert all(row["ranking_scores"] == pytest.approx(expected) for row in ranked)


def test_a_states_sampling_seed_does_not_depend_on_its_batch():
    states = select_turn_states(collaborative_trajectories(4, per_task=1, num_agent_turns=3),
                                TurnPairsConfig(state_fraction=1.0))

    def seeds(batch_size: int, seed: int = 0) -> list[int]:  # in the states' order
        backend = ScriptedBackend()
        sample_candidates(states, backend, TurnPairsConfig(num_candidates=3, generation_batch_size=batch_size,
                                                           seed=seed))
        return [s for *_, batch_seeds in backend.calls for s in batch_seeds]

    by_four = seeds(4)
    assert len(set(by_four)) == len(states)
    assert seeds(5) == by_four
    assert set(seeds(4, seed=1)).isdisjoint(by_four)


# ---------------------------------------------------------------------------------------------------------------
# The whole chain with a real (tiny) policy and critic

def test_stages_chain_with_a_real_policy_backend_and_critic(tmp_path):
    torch = pytest.importorskip("torch")
    pytest.importorskip("trl")
    import copy

    from helpers_tiny_models import synthetic_corpus, tiny_causal_lm, tiny_tokenizer

    from sweet_trl.critic import SweetCritic
    from sweet_trl.generation import TransformersBackend
    from sweet_trl.policy_trainer import check_turn_pairs

    tokenizer = tiny_tokenizer(synthetic_corpus())
    policy = TransformersBackend(tiny_causal_lm(tokenizer, seed=1), tokenizer, device="cpu", name="tiny")
    critic_model = tiny_causal_lm(tokenizer, seed=2)
    with torch.no_grad():  # a critic that differs from its reference
        for p in critic_model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    critic = SweetCritic(critic_model, tokenizer, ref_model=copy.deepcopy(tiny_causal_lm(tokenizer, seed=2)))

    config = TurnPairsConfig(state_fraction=0.5, num_candidates=4, max_new_tokens=6, pairs_per_turn=2)
    records = collaborative_trajectories(4, per_task=1, num_agent_turns=2)
    select_turn_states(records, config, output_dir=tmp_path / "states")
    sample_candidates(tmp_path / "states", policy, config, output_dir=tmp_path / "candidates")
    ranked = rank_candidates(tmp_path / "candidates", critic, config, output_dir=tmp_path / "ranked")
    assert all(r["ranking_error"] is None and len(r["ranking_scores"]) == len(r["candidates"]) for r in ranked)
    row = ranked[0]
    expected = [c - p for c, p in zip(row["critic_mean_logprobs"], row["policy_mean_logprobs"])]
    assert row["ranking_scores"] == pytest.approx(expected)
    assert all(math.isfinite(a) for a in row["advantages"])
    pairs = build_turn_pairs(tmp_path / "ranked", config, output_dir=tmp_path / "pairs")
    assert 1 <= len(pairs) <= 2 * len(ranked)
    check_turn_pairs(pairs)
    privileged = {r["task"]["ground_truth"] for r in records}
    assert not any(c in m["content"] for pair in pairs for m in pair["prompt"] for c in privileged)
