"""``sweet-rl show``: a run's dialogues as a person reads them, from a file the real recorder wrote.

Run: OMP_NUM_THREADS=1 pytest tests/test_show.py -q
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import gymnasium as gym
import pytest

import colbench_gym  # noqa: F401 (registers the environments)
from colbench_gym.tasks.procedural import load_procedural
from colbench_gym.wrappers import RecordTrajectories
from sweet_trl import cli

ROWS = load_procedural("test")[:2]  # two tasks: the first answered right, the second wrong
QUESTION = "What exactly should the function return?"


def _record(path: Path) -> list[dict]:
    """One episode per task through the environment and its recorder: a question, the simulated human's reply,
    then an answer (the reference for the first task, a wrong function for the second)."""
    env = RecordTrajectories(gym.make("ColBench-Backend-v0", tasks=ROWS, max_turns=2), path, policy="scripted")
    for index, row in enumerate(ROWS):
        env.reset(seed=index, options={"task_id": row["task_id"]})
        env.step(QUESTION)
        code = row["ground_truth"] if index == 0 else "def nothing():\n    return None"
        env.step(f"I WANT TO ANSWER:\n```python\n{code}\n```")
    env.close()
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> tuple[Path, list[dict]]:
    path = tmp_path_factory.mktemp("run") / "collect" / "trajectories.jsonl"
    return path, _record(path)


def show(capsys, *argv: str) -> tuple[int, str, str]:
    status = cli.main(["show", *map(str, argv)])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return status, out, err


def test_the_dialogue_is_shown_in_order_with_its_grading(recorded, capsys):
    path, records = recorded
    status, out, _ = show(capsys, path.parent)  # a stage folder holding the file
    assert status == 0 and "2 episodes, 2 matching, showing 2" in out
    first, second = out.split("=== ")[1:]
    reply = records[0]["dialogue_history"][2]["content"]  # the simulated human's answer to the question
    texts = [ROWS[0]["problem_description"].split(". ")[0], f"1  Agent: {QUESTION}", f"Human: {reply}",
             "2  Agent: I WANT TO ANSWER:", "Tests: "]
    positions = [first.find(text) for text in texts]
    assert -1 not in positions and positions == sorted(positions), (texts, first)
    assert first.startswith(records[0]["episode_id"]) and "reward 1.00  SUCCEEDED" in first
    assert "token_ids" not in out and "logprobs" not in out
    tests = records[1]["tests"]
    passed = sum(t["status"] == "passed" for t in tests)
    assert "reward 1.00" not in second and "FAILED" in second and f"Tests: {passed}/{len(tests)} passed" in second
    failing = next(t for t in tests if t["status"] != "passed")
    assert f"{failing['name']} {failing['status']}" in second  # a failed test's message


def test_failed_succeeded_and_task_filter_the_episodes(recorded, capsys):
    path, records = recorded
    good, bad = (r["episode_id"] for r in records)
    _, out, _ = show(capsys, path, "--failed")
    assert bad in out and good not in out and "1 matching" in out
    _, out, _ = show(capsys, path, "--succeeded")
    assert good in out and bad not in out
    _, out, _ = show(capsys, path, "--task", ROWS[1]["template"])
    assert bad in out and good not in out
    _, out, _ = show(capsys, path, "-n", "1")
    assert good in out and bad not in out and "[1 more matching episode: -n 2 or -n 0" in out

    status, out, err = show(capsys, path, "--task", "no_such_template")
    assert status == 1 and out == ""
    assert "no task id" in err and "'no_such_template'" in err and ROWS[0]["task_id"] in err


def test_the_reference_is_shown_only_when_asked(recorded, capsys):
    path, _ = recorded
    body = ROWS[1]["ground_truth"].strip().splitlines()[-1].strip()  # the wrong answer never wrote it
    _, out, _ = show(capsys, path, "--failed")
    assert body not in out and "privileged" not in out.lower()
    _, out, _ = show(capsys, path, "--failed", "--reference")
    reference = out[out.index("Reference (privileged"):]
    assert body in reference


def test_long_messages_are_cut_unless_full(recorded, tmp_path, capsys):
    _, records = recorded
    record = json.loads(json.dumps(records[1]))
    record["dialogue_history"][1]["content"] = "\n".join(f"question line {i}" for i in range(100))
    path = tmp_path / "long.jsonl"
    path.write_text(json.dumps(record) + "\n")
    _, out, _ = show(capsys, path, "--lines", "10")
    assert "question line 8" in out and "question line 9" not in out and "91 more lines; --full" in out
    _, out, _ = show(capsys, path, "--full")
    assert "question line 99" in out and "more lines" not in out


def test_a_malformed_line_is_reported_and_skipped(recorded, tmp_path, capsys):
    _, records = recorded
    path = tmp_path / "trajectories.jsonl"
    path.write_text(f"{json.dumps(records[0])}\n{{\"task\": \n[1, 2]\n{json.dumps(records[1])}\n")
    status, out, err = show(capsys, path)
    assert status == 0 and "2 episodes" in out
    assert all(r["episode_id"] in out for r in records)
    assert f"{path}:2: not valid JSON" in err and f"{path}:3: a JSON list, not a record" in err


def test_a_run_folder_lists_its_files_and_asks_for_one(recorded, tmp_path, capsys):
    _, records = recorded
    run = tmp_path / "run"
    old, new = run / "collect" / "trajectories.jsonl", run / "evaluate" / "zero_shot" / "trajectories.jsonl"
    for file, lines in ((old, records), (new, records[:1])):
        file.parent.mkdir(parents=True)
        file.write_text("".join(json.dumps(r) + "\n" for r in lines))
    os.utime(old, (1_000_000, 1_000_000))
    (new.parent / "_COMPLETE.json").write_text(json.dumps({"info": {"policy": "zero_shot"}}))  # what was evaluated
    status, out, err = show(capsys, run)
    assert status == 2 and "2 trajectory files" in out
    listed = [line.split() for line in out.splitlines()[1:]]
    assert listed == [["1", "episodes", str(new.parent), "(policy", "zero_shot)"],
                      ["2", "episodes", str(old.parent)]]  # newest first
    assert f"name one, e.g. sweet-rl show {new.parent}" in err

    (run / "evaluate" / "zero_shot" / "trajectories.jsonl").unlink()
    status, out, _ = show(capsys, run)  # one file left: shown
    assert status == 0 and str(old) in out and records[1]["episode_id"] in out


def test_paths_with_nothing_to_show_are_clear_errors(tmp_path, capsys):
    status, out, err = show(capsys, tmp_path / "missing")
    assert status == 2 and out == "" and "missing: no such file or folder" in err
    (tmp_path / "empty").mkdir()
    status, out, err = show(capsys, tmp_path / "empty")
    assert status == 2 and out == "" and "no trajectories.jsonl under" in err


def test_a_rank_stage_shows_each_states_candidates_from_the_first_choice_down(tmp_path, capsys):
    """What the critic prefers, read as a person would: the ranked rows the rank stage writes, best first, copies of
    one message merged, each with the score and the two log-probs it is the difference of."""
    pytest.importorskip("datasets")
    from sweet_trl.turn_pairs import TurnPairsConfig, rank_candidates

    texts = ["Which unit?", "Any details?", "Which unit?", "I WANT TO ANSWER: pass"]
    critic, reference = {"Which unit?": -0.5, "Any details?": -1.5, "I WANT TO ANSWER: pass": -3.0}, -1.0
    row = {"state_id": "ep/turn0", "episode_id": "ep", "task_id": "proc-test-seen-convert-00000000",
           "env_id": "ColBench-Backend-v0", "turn": 0, "privileged": "def convert(x): return x * 2.54",
           "prompt": [{"role": "system", "content": "instructions"}, {"role": "user", "content": "Write a converter."}],
           "original": "Hi", "trajectory_reward": 0.0, "candidates": texts, "policy_mean_logprobs": [-1.0] * 4,
           "candidate_num_tokens": [3, 3, 3, 6], "generation_errors": []}

    def scorer(dialogue, candidates, privileged):
        return [(critic[text], reference) for text in candidates]

    rank = tmp_path / "rank"
    rank_candidates([row], scorer, TurnPairsConfig(ranking="critic_advantage"), output_dir=rank / "ranked")
    status, out, _ = show(capsys, rank, "--width", "100")
    assert status == 0 and "1 ranked turn states, showing 1" in out
    lines = [line.strip() for line in out.splitlines()]
    assert lines.index("Human: Write a converter.") < lines.index(
        "#1 x2  score +0.500  (critic -0.500, reference -1.000, 3 tokens)") < lines.index("Agent: Which unit?") < \
        lines.index("#2  score -0.500  (critic -1.500, reference -1.000, 3 tokens)") < lines.index(
        "#3  score -2.000  (critic -3.000, reference -1.000, 6 tokens)")
    assert "2.54" not in out  # the reference only when asked
    status, out, _ = show(capsys, rank / "ranked", "--reference")
    assert status == 0 and "def convert(x): return x * 2.54" in out
    assert show(capsys, rank, "--task", "other")[0] == 1
    status, _, err = show(capsys, rank, "--failed")
    assert status == 2 and "ranked turn states are picked with --task and -n" in err

    # a candidate the critic could not score (nan) comes last, not wherever the sort leaves it
    critic["Any details?"] = float("nan")
    rank_candidates([row], scorer, TurnPairsConfig(ranking="critic_advantage"), output_dir=tmp_path / "nan" / "ranked")
    out = show(capsys, tmp_path / "nan", "--width", "100")[1]
    order = [line.strip() for line in out.splitlines() if line.strip().startswith(("#", "Agent:"))]
    assert order[1::2] == ["Agent: Which unit?", "Agent: I WANT TO ANSWER: pass", "Agent: Any details?"]
    assert order[4].startswith("#3  score +nan")

    # another selector's rows (random, the hidden tests) name it, and show its score alone: no critic log-probs
    from sweet_trl.selectors import random_scorer

    rank_candidates([row], random_scorer(0), TurnPairsConfig(ranking="critic_advantage"),
                    output_dir=tmp_path / "random" / "ranked")
    (tmp_path / "random" / "_COMPLETE.json").write_text(json.dumps({"info": {"selector": "random"}}))
    out = show(capsys, tmp_path / "random", "--width", "100")[1]
    assert "ranked by the random selector" in out and "critic " not in out and "(3 tokens)" in out


def test_critic_pairs_show_the_chosen_trajectory_then_the_rejected_one_from_where_they_part(tmp_path, capsys):
    """The pairs the critic learns from, built by the pairs stage's own code: both trajectories, the rejected one
    from the message where the two part, the rewards that ordered them."""
    from sweet_trl.pairs import build_critic_pairs

    def record(seed, question, reward):
        task = {"task_id": "unit", "problem_description": "Write a converter.", "ground_truth": "def f(x): return x"}
        return {"task": task, "task_id": "unit", "episode_id": f"unit/{seed}", "seed": seed, "reward": reward,
                "success": reward == 1.0, "env_id": "ColBench-Backend-v0",
                "dialogue_history": [{"role": "user", "content": "Write a converter."},
                                     {"role": "assistant", "content": question},
                                     {"role": "user", "content": "Inches to centimetres."},
                                     {"role": "assistant", "content": "I WANT TO ANSWER: pass"}]}

    pairs, _ = build_critic_pairs([record(0, "Which units?", 1.0), record(1, "Any details?", 0.0)])
    folder = tmp_path / "critic_pairs"
    folder.mkdir()
    (folder / "pairs.jsonl").write_text("".join(json.dumps(pair) + "\n" for pair in pairs))
    status, out, _ = show(capsys, folder, "--width", "100")
    assert status == 0 and "1 critic pairs, showing 1" in out
    assert "unit/0 (reward 1.0) chosen over unit/1 (reward 0.0)" in out
    chosen, rejected = out.split("\nchosen:\n")[1].split("\nrejected:\n")
    assert "Agent: Which units?" in chosen and "Any details?" not in chosen
    assert rejected.splitlines()[0].strip() == "[... the first 1 message, as above]"
    assert rejected.splitlines()[1].strip() == "1  Agent: Any details?"
    assert "def f(x)" not in out and "def f(x): return x" in show(capsys, folder, "--reference")[1]
    assert show(capsys, folder, "--task", "other")[0] == 1


def test_a_credit_folder_shows_each_states_candidates_by_value_with_each_rankers_place(tmp_path, capsys):
    credit = tmp_path / "run" / "credit"
    (credit / "ground_truth").mkdir(parents=True)
    (credit / "scores").mkdir()
    prompt = [{"role": "system", "content": "Ask, then answer."},
              {"role": "user", "content": "Write is_adult(age). The signature of the function is: def is_adult(age)"}]
    question = {"state_id": "proc-validation-seen-is_adult-1/1000/turn0", "task_id": "proc-validation-seen-is_adult-1",
                "kind": "question", "turn": 0, "prompt": prompt, "privileged": "def is_adult(age): return age > 28",
                "candidates": ["Which age counts?", "Anything else?", "What is the minimum age?"],
                "values": [0.5, 0.0, 0.9], "value_se": [None, 0.0, 0.05], "exact": [False] * 3,
                "first_replies": [["More than 28."], ["I don't know."], ["More than 28."]]}
    answer = {**question, "state_id": "proc-validation-seen-is_adult-2/1000/turn1", "kind": "answer", "turn": 1,
              "task_id": "proc-validation-seen-is_adult-2", "candidates": ["I WANT TO ANSWER: a", "I WANT TO ANSWER: b"],
              "values": [0.3, 0.3], "value_se": [0.0, 0.0], "exact": [True, True], "first_replies": [[], []]}
    truth = {"num_candidates": 3}  # each file's first line says what made it
    (credit / "ground_truth" / "values.jsonl").write_text(
        "".join(json.dumps(row) + "\n" for row in ({"settings": truth}, question, answer)))
    # a tie shares the better place; a candidate a ranker could not score (None) has none
    for name, scores, made_for in (("trained_with_c", [0.1, -1.0, 2.0], truth),
                                   ("untrained_with_c__critic_advantage", [2.0, None, 2.0], truth),
                                   ("from_an_older_ground_truth", [0.0, 1.0, 2.0], {"num_candidates": 8})):
        (credit / "scores" / f"{name}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in (
            {"settings": {"ground_truth": made_for}}, {"state_id": question["state_id"], "scores": scores})))

    status, out, err = show(capsys, credit, "-n", "0", "--width", "100")
    assert status == 0 and err == ""  # the settings lines are no rows, and not reported as bad ones
    assert "2 turn states, showing 2; rankers: A trained_with_c, B untrained_with_c:critic_advantage\n" in out
    first = out.split("=== ")[1]
    assert first.startswith("proc-validation-seen-is_adult-1/1000/turn0  (question turn, agent turn 1; "
                            "values 0.000-0.900)")
    rows = [line.split() for line in first.splitlines() if line.startswith("  0.")]
    # from the highest value down: its SE, then the place each ranker gives it (1: its pick), then the candidate
    assert rows == [["0.900", "0.050", "1", "1", "What", "is", "the", "minimum", "age?"],
                    ["0.500", "n/a", "2", "1", "Which", "age", "counts?"],  # one continuation: no SE
                    ["0.000", "0.000", "3", "-", "Anything", "else?"]]
    assert first.count("-> Human: More than 28.") == 2 and "-> Human: I don't know." in first
    second = out.split("=== ")[2]
    assert "(answer turn, agent turn 2; values 0.300-0.300, exact)" in second and "no spread" in second
    assert "-> Human" not in second and "  0.300 exact" in second  # no ranker scored a state without spread
    assert "return age > 28" not in out  # the privileged reference only with --reference
    status, out, _ = show(capsys, credit / "ground_truth", "--task", "is_adult-2", "--reference")
    assert status == 0 and "1 turn states matching" in out and "def is_adult(age): return age > 28" in out
    status, _, err = show(capsys, credit, "--task", "nothing")
    assert status == 1 and "no valued turn state" in err
