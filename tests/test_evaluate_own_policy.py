"""Evaluating a policy of one's own: ``sweet-rl evaluate`` on a model or adapter folder (or a served model) and a JSONL
of one's own ColBench rows, in a fresh run folder, under any precision options; ``sweet-rl compare`` on two such
evaluations, paired by task.

Everything runs for real: the command line, a two-layer Llama built here (and a LoRA adapter on it), the environment
with its offline simulated human and grader. The tiny model never writes a correct function, so the comparison whose
numbers are checked pairs it with a served policy (a loopback OpenAI-compatible server) that answers two of the three
tasks with their reference and the third with a wrong function.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from fake_openai_server import FakeOpenAIServer
from helpers_tiny_models import save_tiny_model

pytest.importorskip("trl")
pytest.importorskip("peft")

from sweet_trl import cli, pipeline

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# Rows in the ColBench backend format (colbench_gym/tasks/schema.py), with ids of one's own.
MY_TASKS = [
    {"task_id": "double", "problem_description": "I need a function that doubles a number. The signature of the "
                                                 "function is: def double(x)",
     "ground_truth": "def double(x):\n    return 2 * x", "hidden_information": "Double means times two.",
     "test_cases": {"test1": "double(2)", "test2": "double(-3)"}},
    {"task_id": "greet", "problem_description": "I need a function that greets someone. The signature of the "
                                                "function is: def greet(name)",
     "ground_truth": "def greet(name):\n    return 'Hello, ' + name + '!'",
     "hidden_information": "The greeting is 'Hello, <name>!'.", "test_cases": {"test1": "greet('Ada')"}},
    {"task_id": "area", "problem_description": "I need the area of a rectangle. The signature of the function is: "
                                               "def area(width, height)",
     "ground_truth": "def area(width, height):\n    return width * height",
     "hidden_information": "Width times height.", "test_cases": {"test1": "area(2, 3)", "test2": "area(0, 5)"}},
]
# Small and quick: two episodes per task, short turns. --config demo_cpu has a warm_start: section.
QUICK = ["--max_new_tokens", "8", "--eval_episodes_per_task", "2", "--generation_batch_size", "8",
         "--num_workers", "2", "--prefix_cache_mb", "64"]


def _write_tasks(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def _evaluation_folder(run_dir: Path) -> Path:
    [folder] = [f for f in (run_dir / "evaluate").iterdir() if (f / pipeline.MARKER).is_file()]
    return folder


def _marker(folder: Path) -> dict:
    return json.loads((folder / pipeline.MARKER).read_text())


def _save_adapter(model_dir: str, adapter_dir: Path) -> Path:
    """A LoRA adapter on the tiny model, saved as peft saves one (no tokenizer beside it), with weights that change
    the model's outputs."""
    import peft
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir)
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    peft.get_peft_model(model, config).save_pretrained(adapter_dir)
    return adapter_dir


@pytest.fixture(scope="module")
def own(tmp_path_factory):
    """A model folder, an adapter folder on it and a task file of one's own, each evaluated in a fresh run folder."""
    root = tmp_path_factory.mktemp("own_policy")
    model = save_tiny_model(root / "my-model")
    adapter = _save_adapter(model, root / "my-adapter")
    tasks = _write_tasks(root / "my_tasks.jsonl", MY_TASKS)
    runs = {}
    for name, policy in (("model", model), ("adapter", str(adapter))):
        run_dir = root / f"eval-{name}"
        status = cli.main(["evaluate", "--config", "demo_cpu", "--run_dir", str(run_dir), "--eval_tasks", str(tasks),
                           "--policy", policy, *QUICK])
        runs[name] = {"status": status, "run_dir": run_dir}
    return {"root": root, "model": model, "adapter": adapter, "tasks": tasks, "runs": runs}


def test_a_model_folder_is_evaluated_on_ones_own_tasks_in_a_fresh_folder(own, capsys):
    run = own["runs"]["model"]
    assert run["status"] == 0
    assert not (run["run_dir"] / "warm_start").exists()  # the policy is named: nothing of the run is needed
    folder = _evaluation_folder(run["run_dir"])
    marker = _marker(folder)
    assert marker["info"]["model"] == own["model"] and marker["counts"] == {
        "episodes": 6, "tasks": 3, "infra_errors": 0, "simulator_errors": 0,
        "generated_tokens": marker["counts"]["generated_tokens"]}
    rows = json.loads((folder / "per_task.json").read_text())
    assert sorted(row["task_id"] for row in rows) == ["area", "double", "greet"]
    # The run's own starting policy still starts from the warm start, which this fresh folder does not have.
    assert cli.main(["evaluate", "--config", "demo_cpu", "--run_dir", str(run["run_dir"]), "--policy", "zero_shot",
                     "--eval_tasks", str(own["tasks"]), *QUICK]) == 1
    assert "run `sweet-rl warm-start`" in capsys.readouterr().err
    # spelled as `sweet-rl baseline zero-shot` spells it, it is the same policy of the run, not a Hub id to fetch
    assert cli.main(["evaluate", "--config", "demo_cpu", "--run_dir", str(run["run_dir"]), "--policy", "zero-shot",
                     "--eval_tasks", str(own["tasks"]), *QUICK]) == 1
    assert "run `sweet-rl warm-start`" in capsys.readouterr().err


def test_evaluate_prints_success_and_tests_passed_with_intervals(own, capsys):
    # Run again, the evaluation is complete: it is skipped, and its numbers are printed all the same.
    assert cli.main(["evaluate", "--config", "demo_cpu", "--run_dir", str(own["runs"]["model"]["run_dir"]),
                     "--eval_tasks", str(own["tasks"]), "--policy", own["model"], *QUICK]) == 0
    out = capsys.readouterr().out
    folder = _evaluation_folder(own["runs"]["model"]["run_dir"])
    assert "skipped" in out
    assert (f"{own['model']} ({folder}): success 0.0 [0.0, 0.0] %   tests passed 0.0 [0.0, 0.0] %   "
            "(3 tasks, 6 episodes; 95% intervals over tasks)") in out
    assert f"sweet-rl compare {folder} <other folder>" in out


def test_an_adapter_folder_is_evaluated_merged_into_its_base(own, tmp_path, capsys):
    run = own["runs"]["adapter"]
    assert run["status"] == 0
    assert not (run["run_dir"] / "warm_start").exists()
    folder = _evaluation_folder(run["run_dir"])
    assert _marker(folder)["info"]["model"] == str(own["adapter"]) and _marker(folder)["counts"]["episodes"] == 6
    # The adapter changes what the model says: the same episode seeds give other dialogues than the base's.
    def dialogues(path: Path) -> dict:
        records = [json.loads(line) for line in (path / "trajectories.jsonl").read_text().splitlines()]
        return {r["episode_id"]: [m["content"] for m in r["dialogue_history"]] for r in records}
    base, adapted = dialogues(_evaluation_folder(own["runs"]["model"]["run_dir"])), dialogues(folder)
    assert base.keys() == adapted.keys() and base != adapted

    # An adapter whose config names a base that is not here is evaluated on the base given with --policy_base.
    moved = Path(shutil.copytree(own["adapter"], tmp_path / "moved-adapter"))
    config = json.loads((moved / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = str(tmp_path / "gone" / "base")
    (moved / "adapter_config.json").write_text(json.dumps(config))
    options = ["evaluate", "--config", "demo_cpu", "--run_dir", str(tmp_path / "run"), "--eval_tasks",
               str(own["tasks"]), "--policy", str(moved), *QUICK]
    assert cli.main(options) == 1
    assert f"no model at {tmp_path / 'gone' / 'base'}" in capsys.readouterr().err
    assert cli.main([*options, "--policy_base", own["model"]]) == 0
    evaluated = [f for f in (tmp_path / "run" / "evaluate").iterdir() if (f / pipeline.MARKER).is_file()]
    assert len(evaluated) == 1 and _marker(evaluated[0])["info"]["policy_base"] == own["model"]
    assert dialogues(evaluated[0]) == adapted  # the same adapter on the same base
    # --policy_base belongs to an adapter folder: with a plain model it is refused before anything runs.
    assert cli.main(["evaluate", "--run_dir", str(tmp_path / "run2"), "--policy", own["model"],
                     "--policy_base", own["model"]]) == 2
    assert "is not an adapter folder" in capsys.readouterr().err and not (tmp_path / "run2").exists()


def test_evaluate_and_the_stages_without_a_trainer_take_the_precision_options(own, tmp_path, monkeypatch, capsys):
    """`$(python -m sweet_trl.precision)` prints `--bf16 true --dtype bfloat16` on a CPU with native bf16: evaluate
    takes both and generates with bf16 weights; the stages without a trainer take them too."""
    loaded = []
    real = pipeline.models.load_causal_lm

    def recording(*args, **kwargs):
        model, tokenizer = real(*args, **kwargs)
        loaded.append(next(model.parameters()).dtype)
        return model, tokenizer

    monkeypatch.setattr(pipeline.models, "load_causal_lm", recording)
    run_dir = tmp_path / "run"
    assert cli.main(["evaluate", "--run_dir", str(run_dir), "--eval_tasks", str(own["tasks"]), "--policy",
                     own["model"], *QUICK, "--bf16", "true", "--dtype", "bfloat16"]) == 0
    import torch

    assert loaded == [torch.bfloat16]
    marker = _marker(_evaluation_folder(run_dir))
    assert marker["config"][1]["dtype"] == "bfloat16" and marker["counts"]["episodes"] == 6
    capsys.readouterr()
    for command, needed in (("critic-pairs", "collect"), ("rank", "collect"), ("policy-pairs", "rank")):
        # past the options, each stops at what it needs first: an earlier stage's output
        assert cli.main([command, "--run_dir", str(tmp_path / "empty"), "--bf16", "true", "--fp16", "false",
                         "--dtype", "bfloat16"]) == 1
        assert f"needs the output of {needed}," in capsys.readouterr().err
    # A misspelt option is still refused.
    assert cli.main(["evaluate", "--run_dir", str(run_dir), "--policy", own["model"], "--bf17", "true"]) == 2
    assert "unknown arguments: ['--bf17', 'true']" in capsys.readouterr().err
    # Another section's option is refused by a command of one stage, with where to set it instead.
    assert cli.main(["evaluate", "--run_dir", str(run_dir), "--policy", own["model"],
                     "--warm_start.expert_forms", "varied"]) == 2
    error = capsys.readouterr().err
    assert "unknown arguments: ['--warm_start.expert_forms', 'varied']" in error
    assert "set 'warm_start.expert_forms' in a copy of it" in error


def test_compare_pairs_the_model_and_the_adapter_by_task(own, tmp_path, capsys):
    """Run folders of one evaluation each stand for that evaluation; the precision options are taken here too."""
    model_folder = _evaluation_folder(own["runs"]["model"]["run_dir"])
    adapter_folder = _evaluation_folder(own["runs"]["adapter"]["run_dir"])
    numbers = tmp_path / "comparison.json"
    assert cli.main(["compare", str(own["runs"]["model"]["run_dir"]), str(own["runs"]["adapter"]["run_dir"]),
                     "--json", str(numbers), "--bf16", "true", "--dtype", "bfloat16"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [
        f"A: {own['model']} ({model_folder}): success 0.0 [0.0, 0.0] %   tests passed 0.0 [0.0, 0.0] %   "
        "(3 tasks, 6 episodes; 95% intervals over tasks)",
        f"B: {own['adapter']} ({adapter_folder}): success 0.0 [0.0, 0.0] %   tests passed 0.0 [0.0, 0.0] %   "
        "(3 tasks, 6 episodes; 95% intervals over tasks)",
        "B minus A, paired by task (3 tasks): success +0.0 [+0.0, +0.0] points   tests passed +0.0 [+0.0, +0.0] points",
    ]
    result = json.loads(numbers.read_text())
    assert result["tasks"] == 3 and result["b_minus_a"] == {"success": [0.0, 0.0, 0.0], "tests_passed": [0.0, 0.0, 0.0]}


def _served_expert(body: dict) -> str:
    """A policy behind an OpenAI-compatible server: the reference of `double` and `greet`, a wrong `area`."""
    asked = " ".join(str(m.get("content")) for m in body["messages"])
    for task in MY_TASKS:
        if task["problem_description"] in asked:
            code = task["ground_truth"] if task["task_id"] != "area" else "def area(width, height):\n    return 0"
            return f"I WANT TO ANSWER:\n```python\n{code}\n```"
    return "What should the function do?"


def test_compare_gives_the_paired_difference_of_a_served_policy_and_the_model(own, tmp_path, capsys):
    with FakeOpenAIServer(responder=_served_expert) as server:
        # demo_cpu forces the last turn's answer, which only a local backend can: the error says what to add
        served = ["evaluate", "--config", "demo_cpu", "--run_dir", str(tmp_path / "refused"), "--eval_tasks",
                  str(own["tasks"]), "--backend", "openai", "--policy_base_url", server.base_url, "--policy", "x"]
        assert cli.main([*served, *QUICK]) == 2
        assert "add --force_answer_on_last_turn false" in capsys.readouterr().err
        status = cli.main(["evaluate", "--config", "demo_cpu", "--run_dir", str(tmp_path / "served"), "--eval_tasks",
                           str(own["tasks"]), "--backend", "openai", "--policy_base_url", server.base_url,
                           "--policy", "my-served-expert", "--force_answer_on_last_turn", "false", *QUICK])
    assert status == 0
    capsys.readouterr()
    numbers = tmp_path / "comparison.json"
    assert cli.main(["compare", str(own["runs"]["model"]["run_dir"]), str(tmp_path / "served"),
                     "--json", str(numbers)]) == 0
    out = capsys.readouterr().out
    result = json.loads(numbers.read_text())
    # Per task, B minus A: success 1, 1, 0 and tests passed 100, 100, 0 (area's reference gives 0 on one test of two,
    # the wrong `area` returns 0 for both: it passes that one): the mean over the three tasks, paired.
    served = {row["task_id"]: row for row in json.loads((_evaluation_folder(tmp_path / "served")
                                                          / "per_task.json").read_text())}
    assert [served[t]["success_rate"] for t in ("double", "greet", "area")] == [1.0, 1.0, 0.0]
    expected_tests = 100 * sum(served[t]["mean_reward"] for t in served) / 3
    assert result["b"]["success"][0] == pytest.approx(200 / 3)
    assert result["b_minus_a"]["success"][0] == pytest.approx(200 / 3)
    assert result["b_minus_a"]["tests_passed"][0] == pytest.approx(expected_tests)
    low, high = result["b_minus_a"]["success"][1:]
    assert 0.0 <= low <= 200 / 3 <= high <= 100.0
    assert "B minus A, paired by task (3 tasks): success +66.7 [" in out


def test_compare_refuses_evaluations_that_are_not_of_the_same_tasks(own, tmp_path, capsys):
    model_folder = _evaluation_folder(own["runs"]["model"]["run_dir"])
    other = Path(shutil.copytree(model_folder, tmp_path / "other"))
    rows = json.loads((other / "per_task.json").read_text())
    (other / "per_task.json").write_text(json.dumps([row for row in rows if row["task_id"] != "greet"]))
    assert cli.main(["compare", str(model_folder), str(other)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("sweet-rl compare: error: A and B were evaluated on different tasks (A 3, B 2, 2 in common; "
                          "only in A: ['greet'], only in B: [])") and err.count("\n") == 1

    # The same task ids with other task texts (an edited task file) are not the same tasks either.
    other = Path(shutil.copytree(model_folder, tmp_path / "edited"))
    records = [json.loads(line) for line in (other / "trajectories.jsonl").read_text().splitlines()]
    for record in records:
        record["task"]["ground_truth"] += "\n# edited"
    (other / "trajectories.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert cli.main(["compare", str(model_folder), str(other)]) == 2
    assert "tasks of the same ids but other texts (3 tasks" in capsys.readouterr().err

    # A run folder of several evaluations must be narrowed to one; a folder of none is named.
    both = tmp_path / "both"
    for folder in (model_folder, _evaluation_folder(own["runs"]["adapter"]["run_dir"])):
        shutil.copytree(folder, both / "evaluate" / folder.name)
    assert cli.main(["compare", str(both), str(model_folder)]) == 2
    assert "holds 2 evaluations" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert cli.main(["compare", str(tmp_path / "empty"), str(model_folder)]) == 2
    assert "holds no finished evaluation" in capsys.readouterr().err


def _written_evaluation(folder: Path, successes: dict[str, float], temperature: float) -> Path:
    """An evaluation folder as `sweet-rl evaluate` leaves it (per-task rows, metrics, settings), without running."""
    folder.mkdir(parents=True)
    rows = [{"task_id": task, "episodes": 2, "mean_reward": rate, "success_rate": rate} for task, rate in
            successes.items()]
    (folder / "per_task.json").write_text(json.dumps(rows))
    (folder / "metrics.json").write_text(json.dumps({"env_id": "ColBench-Backend-v0", "kind": "backend",
                                                     "policy": folder.name}))
    (folder / "settings.json").write_text(json.dumps({
        "policy": folder.name, "env_id": "ColBench-Backend-v0", "simulator": None,
        "sampling": {"max_new_tokens": 48, "temperature": temperature}, "env_kwargs": {"max_turns": 2}}))
    return folder


def test_compare_splits_seen_and_unseen_templates_finds_a_studys_evaluation_and_names_other_settings(tmp_path,
                                                                                                       capsys):
    """On the procedural tasks the difference is also given per template part (a gain on the templates trained on
    is not transfer); an evaluation deep in a study's folders is found; settings that differ are printed with it."""
    seen = [f"proc-test-seen-t{i}-{i:08x}" for i in range(4)]
    unseen = [f"proc-test-unseen-u{i}-{i:08x}" for i in range(4)]
    start = {**{task: 0.0 for task in seen}, **{task: 0.0 for task in unseen}}
    trained = {**{task: 1.0 for task in seen}, **{task: 0.0 for task in unseen}}  # learned the seen templates only
    a = _written_evaluation(tmp_path / "study" / "fair" / "start" / "test" / "evaluate" / "merged-000000", start, 0.5)
    b = _written_evaluation(tmp_path / "other" / "evaluate" / "trained", trained, 1.0)
    numbers = tmp_path / "comparison.json"
    assert cli.main(["compare", str(tmp_path / "study"), str(tmp_path / "other"), "--json", str(numbers)]) == 0
    out = capsys.readouterr().out
    assert f"A: merged-000000 ({a}):" in out and f"B: trained ({b}):" in out
    assert "B minus A, paired by task (8 tasks): success +50.0 [" in out
    assert "  seen templates (4 tasks): success +100.0 [+100.0, +100.0] points" in out
    assert "  unseen templates (4 tasks): success +0.0 [+0.0, +0.0] points" in out
    assert "Run under other settings (part of the difference): sampling.temperature 0.5 / 1.0" in out
    result = json.loads(numbers.read_text())
    assert result["parts"]["unseen"]["b_minus_a"]["success"] == [0.0, 0.0, 0.0]
    assert result["settings_differ"] == {"sampling.temperature": [0.5, 1.0]}
    assert "by_template" not in result and "moved_tasks" not in result  # asked for, not by default
    # where the difference comes from: per template (the largest gain first), then the tasks that moved
    mixed = {**{task: 0.0 for task in seen}, **{task: 1.0 for task in unseen}}
    after = {seen[0]: 0.5, seen[1]: 1.0, seen[2]: 0.0, seen[3]: 0.0, unseen[0]: 0.0, unseen[1]: 1.0,
             unseen[2]: 1.0, unseen[3]: 0.5}  # t1 gains most, t0 less, u0 loses most, u3 less
    before = _written_evaluation(tmp_path / "before" / "evaluate" / "x", mixed, 1.0)
    later = _written_evaluation(tmp_path / "later" / "evaluate" / "y", after, 1.0)
    assert cli.main(["compare", str(before), str(later), "--by-template", "--by-task", "--json", str(numbers)]) == 0
    out = capsys.readouterr().out
    table = out.split("B - A points\n")[1].split("\n\n")[0].splitlines()
    assert [line.split() for line in table] == [
        ["t1", "seen", "1", "0.0", "100.0", "+100.0"], ["t0", "seen", "1", "0.0", "50.0", "+50.0"],
        ["t2", "seen", "1", "0.0", "0.0", "+0.0"], ["t3", "seen", "1", "0.0", "0.0", "+0.0"],  # a tie: by name
        ["u1", "unseen", "1", "100.0", "100.0", "+0.0"], ["u2", "unseen", "1", "100.0", "100.0", "+0.0"],
        ["u3", "unseen", "1", "100.0", "50.0", "-50.0"], ["u0", "unseen", "1", "100.0", "0.0", "-100.0"]]
    moved = out.split("the largest gain first:\n")[1].splitlines()[:4]
    assert [line.split() for line in moved] == [[seen[1], "0", "->", "100"], [seen[0], "0", "->", "50"],
                                                [unseen[3], "100", "->", "50"], [unseen[0], "100", "->", "0"]]
    assert "4 of 8 tasks moved (success %, A -> B)" in out
    assert f"their dialogues: sweet-rl show {later} --task {seen[1]}" in out
    result = json.loads(numbers.read_text())
    assert [row["task_id"] for row in result["moved_tasks"]] == [seen[1], seen[0], unseen[3], unseen[0]]
    assert result["by_template"][1] == {"template": "t0", "part": "seen", "tasks": 1, "a": 0.0, "b": 50.0,
                                        "b_minus_a": 50.0}
    # episodes per task are part of what B - A measures too (their rows tell it, whatever settings were kept)
    rows = json.loads((later / "per_task.json").read_text())
    (later / "per_task.json").write_text(json.dumps([{**row, "episodes": 4} for row in rows]))
    assert cli.main(["compare", str(before), str(later)]) == 0
    assert "Run under other settings (part of the difference): episodes_per_task 2 / 4" in capsys.readouterr().out
    # two evaluations in a study: both named, none picked
    _written_evaluation(tmp_path / "study" / "fair" / "rft" / "test" / "evaluate" / "merged-111111", start, 0.5)
    assert cli.main(["compare", str(tmp_path / "study"), str(b)]) == 2
    assert "holds 2 evaluations" in (err := capsys.readouterr().err) and "merged-111111" in err
