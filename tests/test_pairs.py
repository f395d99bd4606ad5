"""Critic pairs from rollouts: the released recipes, bad data, and the readers."""

import json
import logging
import math

import pytest

from sweet_trl.pairs import (
    PAIR_RULE_PRESETS,
    build_critic_pairs,
    critic_pair_dataset,
    load_trajectories,
    make_pair,
)
from sweet_trl.trajectories import Trajectory


def record(task_id, reward, *, success=None, c="def f():\n    return 1", agent="Which unit?", episode=None, **extra):
    row = {
        "task": {"task_id": task_id, "problem_description": f"Problem {task_id}", "ground_truth": c},
        "dialogue_history": [{"role": "user", "content": f"Problem {task_id}"},
                             {"role": "assistant", "content": agent, "input": "prompt", "output_token_ids": [1, 2]},
                             {"role": "user", "content": "Okay."}],
        "reward": reward,
        **extra,
    }
    if success is not None:
        row["success"] = success
    if episode is not None:
        row["episode_id"] = episode
    return row


def rewards_of(pairs):
    return sorted((p["chosen_reward"], p["rejected_reward"]) for p in pairs)


def test_backend_recipe_pairs_the_successful_best_with_every_lower_trajectory():
    rows = [record("a", 0.5), record("a", 1.0), record("a", 0.0), record("a", 1.0),  # two successes: first is best
            record("b", 0.8), record("b", 0.2)]  # best did not pass every test: no pair
    pairs, stats = build_critic_pairs(rows, **PAIR_RULE_PRESETS["backend"])
    assert rewards_of(pairs) == [(1.0, 0.0), (1.0, 0.5)]  # the tied success is not paired
    assert {p["chosen_episode_id"] for p in pairs} == {"a/1"}  # <task id>/<repeat index> without an episode id
    assert (stats.tasks, stats.tasks_with_pairs, stats.pairs, stats.trajectories) == (2, 1, 2, 6)
    # without the success requirement, task b gets its pair
    pairs, _ = build_critic_pairs(rows, rule="best_vs_rest", require_success=False)
    assert rewards_of(pairs) == [(0.8, 0.2), (1.0, 0.0), (1.0, 0.5)]


def test_success_field_takes_precedence_over_the_reward():
    rows = [record("a", 0.9, success=True), record("a", 0.1, success=False),
            record("b", 1.0, success=False), record("b", 0.0, success=False)]
    pairs, _ = build_critic_pairs(rows, **PAIR_RULE_PRESETS["backend"])
    assert [p["task_id"] for p in pairs] == ["a"]


def test_frontend_recipe_pairs_every_two_trajectories_at_least_a_gap_apart():
    rows = [record("a", 0.9), record("a", 0.85), record("a", 0.5), record("a", 0.5)]
    pairs, _ = build_critic_pairs(rows, **PAIR_RULE_PRESETS["frontend"])
    assert rewards_of(pairs) == [(0.85, 0.5), (0.85, 0.5), (0.9, 0.5), (0.9, 0.5)]
    for pair in pairs:
        assert pair["chosen_reward"] - pair["rejected_reward"] >= 0.1


def test_pair_rows_hold_the_privileged_text_and_plain_dialogues():
    pairs, _ = build_critic_pairs([record("a", 1.0, agent="Good"), record("a", 0.0, agent="Bad")])
    (pair,) = pairs
    assert pair["privileged"] == "def f():\n    return 1"
    assert pair["chosen"][1] == {"role": "assistant", "content": "Good"}  # token ids and prompts are dropped
    assert pair["rejected"][1]["content"] == "Bad"
    assert pair["chosen_task_id"] == pair["rejected_task_id"] == pair["task_id"] == "a"


def test_bad_trajectories_are_dropped_counted_and_logged(caplog):
    no_agent = record("a", 0.0)
    no_agent["dialogue_history"] = no_agent["dialogue_history"][:1]
    malformed = record("a", 0.0)
    malformed["dialogue_history"][1]["role"] = "tool"
    rows = [record("a", 1.0), record("a", 0.0), no_agent, malformed, record("a", None), record("a", math.nan),
            record("a", True), record("a", 0.3, c="  ")]
    with caplog.at_level(logging.WARNING):
        pairs, stats = build_critic_pairs(rows)
    assert len(pairs) == 1
    assert stats.dropped == {"no_agent_turn": 1, "malformed_dialogue": 1, "no_reward": 3, "no_privileged": 1}
    assert "dropped" in caplog.text and "no_reward" in caplog.text
    assert "1 pairs from 1/1 tasks" in stats.summary()


def test_pairs_never_mix_tasks():
    with pytest.raises(ValueError, match="one task"):
        make_pair(record("a", 1.0), record("b", 0.0))
    with pytest.raises(ValueError, match="must exceed"):
        make_pair(record("a", 0.0), record("a", 1.0))
    # one task id, two different ground truths: the rows describe two tasks
    with pytest.raises(ValueError, match="different task"):
        build_critic_pairs([record("a", 1.0, c="def f(): return 1"), record("a", 0.0, c="def f(): return 2")])


def test_original_colbench_rollouts_without_task_ids_are_grouped_by_task_content():
    rows = [record("x", 1.0), record("x", 0.0), record("y", 1.0), record("y", 0.0)]
    for row in rows:
        del row["task"]["task_id"]
    assert Trajectory(rows[0]).task_id == Trajectory(rows[1]).task_id != Trajectory(rows[2]).task_id
    pairs, stats = build_critic_pairs(rows)
    assert stats.pairs == 2 and {p["task_id"] for p in pairs} == {Trajectory(rows[0]).task_id,
                                                                  Trajectory(rows[2]).task_id}
    with pytest.raises(ValueError, match="neither a task_id"):
        _ = Trajectory({"task": {}, "dialogue_history": []}).task_id


def test_max_pairs_per_task_keeps_a_seeded_subset():
    rows = [record("a", r / 10) for r in range(10)]
    first, _ = build_critic_pairs(rows, rule="all_pairs", require_success=False, max_pairs_per_task=5, seed=3)
    again, _ = build_critic_pairs(rows, rule="all_pairs", require_success=False, max_pairs_per_task=5, seed=3)
    full, _ = build_critic_pairs(rows, rule="all_pairs", require_success=False)
    assert len(full) == 45 and len(first) == 5 and first == again


def test_unknown_rule_and_preset_are_errors():
    with pytest.raises(ValueError, match="pair rule"):
        build_critic_pairs([record("a", 1.0)], rule="best")
    with pytest.raises(ValueError, match="preset"):
        critic_pair_dataset([record("a", 1.0)], preset="mobile")


def test_the_critic_configs_pair_options_build_the_pairs():
    """SweetCriticConfig documents how pairs are built: given as ``config``, its options are the ones used."""
    pytest.importorskip("datasets")
    pytest.importorskip("trl")
    from sweet_trl.critic_config import SweetCriticConfig

    rows = [record("a", reward) for reward in (0.0, 0.3, 0.6, 0.9)]  # no success: best_vs_rest would pair nothing
    config = SweetCriticConfig(output_dir="unused", pair_rule="all_pairs", require_success=False, min_reward_gap=0.5)
    pairs = critic_pair_dataset(rows, config=config)
    assert sorted(round(p["chosen_reward"] - p["rejected_reward"], 1) for p in pairs) == [0.6, 0.6, 0.9]
    assert len(critic_pair_dataset(rows, config=config, min_reward_gap=0.0)) == 6  # keywords override it
    with pytest.raises(ValueError, match="no critic pair"):
        critic_pair_dataset(rows, config=SweetCriticConfig(output_dir="unused"))  # best_vs_rest, success required


def test_readers_take_lists_jsonl_files_folders_and_datasets(tmp_path):
    rows = [record("a", 1.0), record("a", 0.0)]
    path = tmp_path / "rollouts.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    loaded = load_trajectories(path)
    assert [{k: r[k] for k in rows[0]} for r in loaded] == rows  # every field kept, ids filled in
    assert [r["episode_id"] for r in loaded] == ["a/0", "a/1"] and [r["success"] for r in loaded] == [True, False]
    assert load_trajectories(iter(rows)) == load_trajectories(rows) == loaded
    (tmp_path / "more.jsonl").write_text(json.dumps(record("b", 1.0)) + "\n")
    assert len(load_trajectories(tmp_path)) == 3
    datasets = pytest.importorskip("datasets")
    dataset = critic_pair_dataset(path, preset="backend")
    assert isinstance(dataset, datasets.Dataset) and len(dataset) == 1
    assert dataset[0]["chosen"][1] == {"role": "assistant", "content": "Which unit?"}
    from_dataset = load_trajectories(datasets.Dataset.from_list(rows))
    assert [(r["episode_id"], r["reward"]) for r in from_dataset] == [(r["episode_id"], r["reward"]) for r in loaded]
    with pytest.raises(ValueError, match="not a trajectory record"):  # e.g. the pairs themselves
        load_trajectories(dataset)
    bad = tmp_path / "bad" / "x.jsonl"
    bad.parent.mkdir()
    bad.write_text(json.dumps(rows[0]) + "\n{not json\n" + json.dumps(rows[1]) + "\n")
    with pytest.raises(ValueError, match="x.jsonl:2"):  # a broken line before the last is an error
        load_trajectories(bad)
    with pytest.raises(FileNotFoundError):
        load_trajectories(tmp_path / "missing.jsonl")
    with pytest.raises(TypeError, match="expected a dict"):
        load_trajectories(["not a record"])
    with pytest.raises(ValueError, match="no critic pair"):
        critic_pair_dataset([record("a", 0.5)])


def test_real_colbench_rows_make_pairs(colbench_data):
    rows = [json.loads(line) for line in (colbench_data / "backend_dev.jsonl").read_text().splitlines()[:3]]
    trajectories = []
    for seed, (row, reward) in enumerate([(rows[0], 1.0), (rows[0], 0.25), (rows[1], 0.0), (rows[2], 1.0)]):
        trajectories.append({"task": row, "reward": reward, "success": reward == 1.0, "seed": seed,
                             "dialogue_history": [{"role": "user", "content": row["problem_description"]},
                                                  {"role": "assistant", "content": "I WANT TO ANSWER: pass"}]})
    pairs, stats = build_critic_pairs(trajectories, **PAIR_RULE_PRESETS["backend"])
    assert stats.tasks == 3 and stats.pairs == 1
    assert pairs[0]["privileged"] == rows[0]["ground_truth"] and pairs[0]["rejected_reward"] == 0.25


def test_json_lists_and_saved_dataset_folders_are_read_too(tmp_path):
    pytest.importorskip("datasets")
    from sweet_trl.trajectories import save_dataset

    rows = [record("a", 1.0, episode="a/0"), record("a", 0.0, episode="a/1")]
    (tmp_path / "rollouts.json").write_text(json.dumps(rows))
    save_dataset(rows, tmp_path / "saved")
    for source in (tmp_path / "rollouts.json", tmp_path / "saved"):
        pairs, stats = build_critic_pairs(source)
        assert stats.trajectories == 2 and [(p["chosen_episode_id"], p["rejected_episode_id"]) for p in pairs] == [
            ("a/0", "a/1")]


def test_a_regraded_episode_replaces_its_failed_grading(tmp_path):
    # The collector's retry_errors appends the re-graded copy of an episode whose grader failed.
    failed = record("a", 0.0, success=False, episode="a/0", grader={"infra_error": True})
    other = record("a", 0.0, success=False, episode="a/1", agent="Bad", grader={"infra_error": False})
    regraded = record("a", 1.0, success=True, episode="a/0", agent="Good", grader={"infra_error": False})
    path = tmp_path / "rollouts.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in (failed, other, regraded)))
    for source in (path, [failed, other, regraded]):
        pairs, stats = build_critic_pairs(source, **PAIR_RULE_PRESETS["backend"])
        assert [(p["chosen_episode_id"], p["rejected_episode_id"]) for p in pairs] == [("a/0", "a/1")]
        assert pairs[0]["chosen"][1]["content"] == "Good" and pairs[0]["rejected"][1]["content"] == "Bad"
        assert stats.trajectories == 2 and not stats.dropped
    assert [r["episode_id"] for r in load_trajectories(path)] == ["a/0", "a/1"]


def test_episodes_whose_infrastructure_failed_are_dropped_and_counted():
    from sweet_trl.trajectories import has_infra_error

    grader_failed = record("a", 0.0, success=False, grader={"infra_error": True})  # never re-graded
    render_failed = record("a", 0.0, infra_error=True)        # frontend: the renderer failed, similarity 0
    env_failed = record("a", None, outcome="env_error")        # the episode could not be played to its end
    rows = [record("a", 1.0), record("a", 0.5), grader_failed, render_failed, env_failed]
    pairs, stats = build_critic_pairs(rows, **PAIR_RULE_PRESETS["frontend"])
    assert rewards_of(pairs) == [(1.0, 0.5)]  # the failed ones would have been rejected trajectories
    assert stats.dropped == {"grader_infra_error": 1, "render_infra_error": 1, "infra_failure": 1}
    for row in rows:
        assert (Trajectory(row).infra_drop_reason is not None) == has_infra_error(row)


def test_a_partial_last_line_is_skipped(tmp_path, caplog):
    rows = [record("a", 1.0), record("a", 0.0)]
    path = tmp_path / "rollouts.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + json.dumps(record("a", 0.5))[:40])
    with caplog.at_level(logging.WARNING):
        pairs, stats = build_critic_pairs(path)
    assert stats.trajectories == 2 and rewards_of(pairs) == [(1.0, 0.0)]
    assert "partial last record" in caplog.text


def test_success_reward_decides_for_original_colbench_rows():
    rows = [record("a", 0.9), record("a", 0.2)]  # no success flag: read_trajectories derives reward >= 1
    assert build_critic_pairs(rows, **PAIR_RULE_PRESETS["backend"])[0] == []
    pairs, _ = build_critic_pairs(rows, **PAIR_RULE_PRESETS["backend"], success_reward=0.8)
    assert rewards_of(pairs) == [(0.9, 0.2)]


def test_told_differs_only_keeps_the_pairs_whose_sides_the_human_told_different_things():
    """The diagnostic pair filter: a pair whose sides asked differently but were told the same is left out and
    counted; the default keeps it, and leaves the stage's fingerprint as it was before the option existed."""
    from sweet_trl.pairs import difference_before_answer
    from sweet_trl.pipeline.runner import _without_neutral_additions
    from sweet_trl.pipeline_config import CriticPairsArguments

    def asked(reward, question, reply):
        row = record("a", reward, agent=question)
        row["dialogue_history"][2]["content"] = reply
        row["dialogue_history"].append({"role": "assistant", "content": "I WANT TO ANSWER:\ndef f():\n    return 5"})
        return row

    rows = [asked(1.0, "What is the limit?", "The limit is 5."), asked(0.5, "Which limit?", "The limit is 5."),
            asked(0.0, "Hm?", "I don't know.")]
    every, stats = build_critic_pairs(rows, **PAIR_RULE_PRESETS["backend"])
    assert [difference_before_answer(p) for p in every] == ["same_told", "chosen_told_more"]
    assert stats.told_alike is None and "told alike" not in stats.summary()
    kept, stats = build_critic_pairs(rows, **PAIR_RULE_PRESETS["backend"], told_differs_only=True)
    assert rewards_of(kept) == [(1.0, 0.0)] and stats.pairs == 1 and stats.told_alike == 1
    assert "1 pairs told alike left out" in stats.summary()
    assert "told_differs_only" not in _without_neutral_additions(CriticPairsArguments())
    assert _without_neutral_additions(CriticPairsArguments(told_differs_only=True))["told_differs_only"] is True
