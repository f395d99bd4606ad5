"""The procedural task family: format, determinism, held-out values and templates, discriminating tests, and the
validation split (disjoint from train and test; the train and test rows pinned as they were before it).

Run: pytest tests/test_procedural_tasks.py -q

References are the package's own trusted code, so they run in this process (the validation references also run
in the sandboxed grader, as an environment grades them). For every task, each hidden value swapped for another
value of its pool or of its reserved validation values (a guess instead of a question) must fail at least one test.
"""

from __future__ import annotations

import ast
import hashlib
import json
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

import colbench_gym  # noqa: F401 - registers the environments
from colbench_gym.execution import Grader
from colbench_gym.tasks import resolve_tasks
from colbench_gym.tasks.procedural import (
    SIGNATURE_MARKER,
    TRAIN_TEMPLATES,
    UNSEEN_TEMPLATES,
    VALIDATION_UNSEEN_TEMPLATES,
    WARM_START_TEMPLATES,
    Template,
    generate_tasks,
    load_procedural,
    task_part,
    task_template,
    template_clashes,
)

TRAIN = load_procedural("train")
TEST = load_procedural("test")
VALIDATION = load_procedural("validation")
TEMPLATES = {t.name: t for t in TRAIN_TEMPLATES + UNSEEN_TEMPLATES + VALIDATION_UNSEEN_TEMPLATES}
# Per-row digests of procedural:train and procedural:test as they were before the validation split was added:
# shipped results, cached runs and the shipped warm start name these rows.
PINNED_ROWS = json.loads((Path(__file__).parent / "data" / "procedural_split_rows.json").read_text(encoding="utf-8"))


def run_call(source: str, call: str) -> Any:
    namespace: dict[str, Any] = {}
    exec(compile(source, "<reference>", "exec"), namespace)  # noqa: S102 - our own generated references
    return eval(compile(call, "<test>", "eval"), namespace)


def outputs(source: str, row: dict[str, Any]) -> list[Any]:
    """What ``source`` returns for each of the row's test calls; a call that raises counts as a failed test."""
    got = []
    for call in row["test_cases"].values():
        try:
            got.append(run_call(source, call))
        except Exception:  # noqa: BLE001 - a crash is a failed test
            got.append(object())
    return got


def test_sizes_templates_and_parts():
    assert len(TRAIN) == 400 and len(TEST) == 80
    assert len(TRAIN_TEMPLATES) >= 20 and len(UNSEEN_TEMPLATES) >= 5
    assert {r["template"] for r in TRAIN} == {t.name for t in TRAIN_TEMPLATES}
    parts = [task_part(r["task_id"]) for r in TEST]
    assert parts.count("unseen") == 32 and parts.count("seen") == 48
    assert {r["template"] for r in TEST if task_part(r["task_id"]) == "unseen"} == {t.name for t in UNSEEN_TEMPLATES}
    # any prefix keeps the proportion, so max_eval_tasks cuts a balanced test set
    first = [task_part(r["task_id"]) for r in TEST[:20]]
    assert first.count("unseen") == 8
    ids = [r["task_id"] for r in TRAIN + TEST]
    assert len(set(ids)) == len(ids)


def test_every_task_id_names_its_template_for_every_family():
    from colbench_gym.tasks.procedural import task_families

    for name, (family, _) in task_families().items():
        rows = [*family.load("train"), *family.load("validation"), *family.load("test"), *family.load("warm_start")]
        assert all(task_template(r["task_id"]) == r["template"] for r in rows), name
    assert task_template("proc-test-seen-") is None and task_template("someone-else-s-task") is None


def test_deterministic_for_a_seed_and_different_across_seeds():
    assert generate_tasks(50, "test", seed=3) == generate_tasks(50, "test", seed=3)
    assert generate_tasks(50, "test", seed=3) != generate_tasks(50, "test", seed=4)
    assert load_procedural("train") == TRAIN


def test_test_tasks_use_values_and_references_no_train_task_uses():
    train_code = {r["ground_truth"] for r in TRAIN}
    assert not train_code & {r["ground_truth"] for r in TEST}
    train_templates = {r["template"] for r in TRAIN}
    assert not train_templates & {r["template"] for r in TEST if task_part(r["task_id"]) == "unseen"}


@pytest.mark.parametrize("row", TRAIN + VALIDATION + TEST, ids=lambda r: r["task_id"])
def test_row_format_and_reference(row):
    task = resolve_tasks([row])[0]
    assert row["hidden_information"] == row["ground_truth"]
    assert list(row["test_cases"]) == [f"test{i}" for i in range(1, 11)]
    tree = ast.parse(row["ground_truth"])
    (function,) = [node for node in tree.body if isinstance(node, ast.FunctionDef)]
    signature = row["problem_description"].rsplit(SIGNATURE_MARKER, 1)[1]
    assert signature == row["ground_truth"].splitlines()[0].rstrip(":")
    outputs = [run_call(task.ground_truth, call) for call in task.test_cases.values()]
    assert all(o is not None for o in outputs)
    assert len({repr(o) for o in outputs}) >= 2, "ten tests with one answer probe nothing"
    assert all(call.startswith(f"{function.name}(") for call in task.test_cases.values())


def _values_of(row) -> dict[str, Any]:
    template = TEMPLATES[row["template"]]
    split = row["task_id"].split("-")[1]
    for values in template.values_for(split, whole_pools=task_part(row["task_id"]) == "unseen"):
        if template.row(values, split, "x")["ground_truth"] == row["ground_truth"]:
            return values
    raise AssertionError(f"{row['task_id']}: no values of its template make it")


@pytest.mark.parametrize("row", TRAIN[::7] + VALIDATION + TEST, ids=lambda r: r["task_id"])
def test_a_guessed_hidden_value_fails_a_test(row):
    """Every hidden value matters: any other value of its pool or of its reserved validation values (a guess) fails
    some test."""
    template = TEMPLATES[row["template"]]
    values = _values_of(row)
    expected = [run_call(row["ground_truth"], call) for call in row["test_cases"].values()]
    for name, pool in template.pools.items():
        for other in dict.fromkeys([*pool, *template.validation_values.get(name, ())]):
            if other == values[name]:
                continue
            guess = template.code.format(**{**values, name: other})
            got = outputs(guess, row)
            assert got != expected, f"guessing {name}={other!r} instead of {values[name]!r} passes every test"


def test_description_does_not_state_the_hidden_values():
    for row in TRAIN + VALIDATION + TEST:
        request = row["problem_description"].rsplit(SIGNATURE_MARKER, 1)[0]
        for value in _values_of(row).values():
            if isinstance(value, (int, float)) and value >= 2:
                assert str(value) not in request, row["task_id"]


def test_bad_requests_are_refused_clearly():
    with pytest.raises(ValueError, match="make only"):
        generate_tasks(10_000, "train")
    with pytest.raises(ValueError, match="make only"):
        generate_tasks(500, "test", templates="unseen")
    with pytest.raises(ValueError, match="unknown procedural templates"):
        generate_tasks(5, "train", templates=["no_such_template"])
    with pytest.raises(ValueError, match="never appear in the train split"):
        generate_tasks(5, "train", templates="unseen")
    with pytest.raises(ValueError, match="positive int"):
        generate_tasks(0, "train")
    with pytest.raises(ValueError, match="choose 'train', 'validation', 'test' or 'warm_start'"):
        load_procedural("dev")
    with pytest.raises(ValueError, match=r"procedural split must be one of \['train', 'validation', 'test'\]"):
        generate_tasks(5, "dev")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="backend"):
        resolve_tasks("procedural:train", kind="frontend")


# -- the train and test rows stay as they were ----------------------------------------------------------------------

def _row_digest(row: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(row, sort_keys=True).encode()).hexdigest()[:16]


@pytest.mark.parametrize("split", ["train", "test"])
def test_train_and_test_rows_are_the_pinned_ones(split):
    """Every row of procedural:train and procedural:test, in order, bit for bit as before the validation split:
    a template edit that moves one row names it here."""
    rows = TRAIN if split == "train" else TEST
    pinned = PINNED_ROWS[split]
    assert [r["task_id"] for r in rows] == list(pinned)
    changed = [r["task_id"] for r in rows if _row_digest(r) != pinned[r["task_id"]]]
    assert not changed, f"{len(changed)} {split} rows changed, e.g. {changed[:5]}"


# -- the validation split -------------------------------------------------------------------------------------------

def test_validation_sizes_templates_parts_and_ids():
    assert len(VALIDATION) == 80
    parts = [task_part(r["task_id"]) for r in VALIDATION]
    assert parts.count("seen") == 48 and parts.count("unseen") == 32
    assert all(r["task_id"].startswith(f"proc-validation-{task_part(r['task_id'])}-{r['template']}-")
               for r in VALIDATION)
    assert {r["template"] for r in VALIDATION if task_part(r["task_id"]) == "seen"} == {t.name for t in TRAIN_TEMPLATES}
    assert {r["template"] for r in VALIDATION if task_part(r["task_id"]) == "unseen"} == \
        {t.name for t in VALIDATION_UNSEEN_TEMPLATES}
    assert 6 <= len(VALIDATION_UNSEEN_TEMPLATES) <= 8
    # any prefix keeps the proportion, as the test split's does
    assert [task_part(r["task_id"]) for r in VALIDATION[:20]].count("unseen") == 8
    ids = [r["task_id"] for r in TRAIN + VALIDATION + TEST]
    assert len(set(ids)) == len(ids)
    assert len(resolve_tasks("procedural:validation")) == 80


def test_validation_is_deterministic_for_a_seed():
    assert load_procedural("validation") == VALIDATION
    assert generate_tasks(30, "validation", seed=1) == generate_tasks(30, "validation", seed=1)
    assert generate_tasks(30, "validation", seed=1) != generate_tasks(30, "validation", seed=2)


def test_no_validation_reference_is_a_train_or_test_reference():
    held = {r["ground_truth"] for r in TRAIN + TEST}
    assert not held & {r["ground_truth"] for r in VALIDATION}


def test_reserved_validation_values_occur_in_no_train_or_test_task_of_their_template():
    """Each seen validation task takes, in every pool its template reserves values for, a reserved value; no train
    or test task of that template holds that value in that pool (the other pools are two-way choices such as
    ``>`` / ``>=``, drawn whole). The reserved values lie outside the pools, so other seeds' draws cannot hold them
    either."""
    used: dict[tuple[str, str], set[Any]] = {}
    for row in TRAIN + TEST:
        if task_part(row["task_id"]) != "unseen":
            for name, value in _values_of(row).items():
                used.setdefault((row["template"], name), set()).add(value)
    seen_rows = [r for r in VALIDATION if task_part(r["task_id"]) == "seen"]
    assert seen_rows
    for row in seen_rows:
        template = TEMPLATES[row["template"]]
        assert template.validation_values, f"{template.name} reserves no validation values"
        values = _values_of(row)
        for name, reserved in template.validation_values.items():
            assert values[name] in reserved, row["task_id"]
            assert values[name] not in used[(template.name, name)], f"{row['task_id']}: {name}={values[name]!r}"
            assert values[name] not in template.pools[name]
    two_way = {(t.name, name) for t in TRAIN_TEMPLATES for name, pool in t.pools.items()
               if name not in t.validation_values}
    assert all(len(set(TEMPLATES[t].pools[name])) == 2 for t, name in two_way), sorted(two_way)


def test_validation_unseen_templates_are_their_own():
    """No name, function or request shared with the train templates, the test's unseen templates or the warm-start
    pool; no train or test task comes from them."""
    assert template_clashes(VALIDATION_UNSEEN_TEMPLATES,
                            TRAIN_TEMPLATES + UNSEEN_TEMPLATES + WARM_START_TEMPLATES) == []
    own = {t.name for t in VALIDATION_UNSEEN_TEMPLATES}
    assert not own & {r["template"] for r in TRAIN + TEST}
    # the check sees a clash: a template against itself shares all three
    first = VALIDATION_UNSEEN_TEMPLATES[0]
    assert template_clashes([first], UNSEEN_TEMPLATES + (first,)) == [
        f"{first.name} (function of {first.name})", f"{first.name} (name of {first.name})",
        f"{first.name} (request of {first.name})"]


def test_a_split_draws_only_its_own_unseen_templates():
    with pytest.raises(ValueError, match=r"\['overtime_pay'\] are unseen templates of another split"):
        generate_tasks(3, "validation", templates=["overtime_pay"])
    with pytest.raises(ValueError, match=r"\['bag_too_heavy'\] are unseen templates of another split"):
        generate_tasks(3, "test", templates=["bag_too_heavy"])
    with pytest.raises(ValueError, match="never appear in the train split"):
        generate_tasks(3, "train", templates=["bag_too_heavy"])
    rows = generate_tasks(6, "validation", templates="unseen")
    assert {r["template"] for r in rows} == {t.name for t in VALIDATION_UNSEEN_TEMPLATES}
    assert {task_part(r["task_id"]) for r in generate_tasks(6, "validation", templates="seen")} == {"seen"}


def test_a_reserved_value_inside_its_pool_or_of_no_pool_is_refused():
    late_fee = TEMPLATES["late_fee"]
    build = lambda reserved: Template(late_fee.name, late_fee.request, late_fee.code, late_fee.pools, late_fee.calls,
                                      validation_values=reserved)
    with pytest.raises(ValueError, match=r"validation values \[0.5\] of 'rate' are in its pool"):
        build({"rate": (0.35, 0.5)})
    with pytest.raises(ValueError, match="'fee', which is not one of its pools"):
        build({"fee": (0.35,)})
    with pytest.raises(ValueError, match="no validation values for 'rate'"):
        build({"rate": ()})
    with pytest.raises(ValueError, match="reserves no validation values"):
        build({}).values_for("validation")


def test_task_part_reads_test_and_validation_ids():
    assert task_part("proc-validation-unseen-initials-0123abcd") == "unseen"
    assert task_part("proc-validation-seen-late_fee-0123abcd") == "seen"
    assert task_part("proc-test-seen-late_fee-0123abcd") == "seen"
    assert task_part("proc-train-seen-late_fee-0123abcd") is None


def test_every_validation_reference_passes_its_own_tests_in_the_sandboxed_grader():
    with Grader(workers=2, timeout_s=5.0, allow_code_execution=True, reference_disk_cache=False) as grader:
        results = grader.grade_many([(r["ground_truth"], r["ground_truth"], r["test_cases"]) for r in VALIDATION])
    failed = {r["task_id"]: result.error or [t.detail for t in result.tests if t.detail][:1]
              for r, result in zip(VALIDATION, results) if not result.success}
    assert not failed


def test_a_validation_episode_answered_with_the_reference_succeeds():
    env = gym.make("ColBench-Backend-v0", tasks="procedural:validation")
    parts = [task_part(r["task_id"]) for r in VALIDATION]
    for index in (parts.index("seen"), parts.index("unseen")):
        _, info = env.reset(options={"task_index": index})
        _, reward, terminated, _, info = env.step("I WANT TO ANSWER:\n" + VALIDATION[index]["ground_truth"])
        assert terminated and reward == 1.0 and info["success"], VALIDATION[index]["task_id"]
    env.close()


def test_a_task_family_of_ones_own_is_registered_by_name_and_split_by_template_part(monkeypatch):
    """A family built from templates (here: copies of the procedural ones under another id prefix) becomes
    ``tasks="<name>:<split>"`` in the process that registers it, and its ids count as seen or unseen templates
    wherever figures are split."""
    import dataclasses

    from colbench_gym.tasks import procedural

    monkeypatch.setattr(procedural, "_REGISTERED", {})  # registrations live in the process: none leaks out

    class MineTemplate(procedural.Template):
        id_prefix = "mine"

    def mine(templates):
        return tuple(MineTemplate(**{f.name: getattr(t, f.name) for f in dataclasses.fields(t)}) for t in templates)

    family = procedural.TaskFamily("mine", mine(procedural.TRAIN_TEMPLATES[:4]), mine(procedural.UNSEEN_TEMPLATES[:2]),
                                   mine(procedural.VALIDATION_UNSEEN_TEMPLATES[:2]), (), id_prefix="mine",
                                   sizes={"train": 20, "validation": 10, "test": 10, "warm_start": 1})
    with pytest.raises(FileNotFoundError, match="'<family>:<split>'"):
        resolve_tasks("mine:test")
    procedural.register_task_family(family)
    tasks = resolve_tasks("mine:test")
    assert len(tasks) == 10 and all(t.task_id.startswith("mine-test-") for t in tasks)
    assert sorted(task_part(t.task_id) for t in tasks) == ["seen"] * 6 + ["unseen"] * 4
    env = gym.make("ColBench-Backend-v0", tasks="mine:validation")
    _, info = env.reset(seed=0, options={"task_index": 0})
    assert info["task_id"].startswith("mine-validation-")
    env.close()
    # templates that write another prefix than their family's would be counted by no part: refused when built
    with pytest.raises(ValueError, match=rf"id_prefix 'mine', but templates \['{procedural.TRAIN_TEMPLATES[0].name}'"):
        procedural.TaskFamily("mine", procedural.TRAIN_TEMPLATES[:1], (), (), (), id_prefix="mine")
    with pytest.raises(ValueError, match="ships with colbench_gym"):
        procedural.register_task_family(dataclasses.replace(family, name="procedural"))
