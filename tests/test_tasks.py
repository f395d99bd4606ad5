"""Task loaders: real ColBench rows unchanged, the Hub layout offline, and the built-in splits."""

import json

import gymnasium as gym
import pytest

import colbench_gym  # noqa: F401
from colbench_gym.tasks import BackendTask, is_test_split, load_builtin, load_hub, load_jsonl, resolve_tasks


def test_real_colbench_rows_load_unchanged_and_references_score_one(colbench_data):
    path = colbench_data / "backend_dev.jsonl"
    raw = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    tasks = load_jsonl(path, "backend")
    assert len(tasks) == len(raw) == 200
    for task, row in zip(tasks, raw):
        assert {k: v for k, v in task.to_row().items() if k != "task_id"} == row

    env = gym.make("ColBench-Backend-v0", tasks=str(path), privileged=True)
    failures = []
    for task in tasks:
        _, info = env.reset(options={"task_id": task.task_id})
        _, reward, terminated, _, info = env.step("I WANT TO ANSWER:\n" + info["privileged"]["ground_truth"])
        if not (terminated and reward == 1.0):
            failures.append((task.task_id, reward, info.get("grader")))
    assert not failures, failures[:3]


def _fake_hub_cache(root, repo_id, files):
    """The on-disk layout huggingface_hub reads when offline: refs/main -> snapshots/<commit>/<file>."""
    commit = "0" * 40
    repo_dir = root / ("datasets--" + repo_id.replace("/", "--"))
    (repo_dir / "refs").mkdir(parents=True)
    (repo_dir / "refs" / "main").write_text(commit)
    for name, text in files.items():
        target = repo_dir / "snapshots" / commit / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)


def test_hub_loader_reads_colbench_layout_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    row = {"problem_description": "p", "ground_truth": "def f(x):\n    return x + 1",
           "hidden_information": "def f(x):\n    return x + 1", "test_cases": {"test1": "f(1)"}}
    rows = [{**row, "problem_description": f"p{i}"} for i in range(1005)]
    _fake_hub_cache(tmp_path, "facebook/collaborative_agent_bench", {
        "backend_tasks/train.jsonl": "\n".join(json.dumps(r) for r in rows[:7]),
        "backend_tasks/test.jsonl": "\n".join(json.dumps(r) for r in rows),
    })
    train = load_hub("train", "backend", cache_dir=tmp_path)
    test = load_hub("test", "backend", cache_dir=tmp_path)
    assert len(train) == 7 and isinstance(train[0], BackendTask)
    assert len(test) == 1000  # the released evaluation uses the first 1000 test rows
    assert test[999].problem_description == "p999"


def test_builtin_splits_are_disjoint_and_complete():
    train, test, everything = (load_builtin(s) for s in ("train", "test", "all"))
    assert len(everything) >= 40
    assert not {t.task_id for t in train} & {t.task_id for t in test}
    assert len(train) + len(test) == len(everything)


def test_a_test_split_is_told_by_its_name_in_every_form():
    assert all(map(is_test_split, ["test", "hub:test", "procedural:test", "procedural_multi:test"]))
    assert not any(map(is_test_split, ["train", "all", "procedural:validation", "tests/tasks.jsonl", ["test"]]))


def test_resolve_rejects_unknown_sources():
    with pytest.raises(FileNotFoundError, match="neither a built-in split"):
        resolve_tasks("no-such-split-or-file")
    with pytest.raises(TypeError):
        resolve_tasks(42)
