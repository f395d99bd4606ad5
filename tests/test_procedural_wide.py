"""The widened procedural family (``procedural_wide``): 40 train templates, and procedural's own validation, test and
warm-start rows; the 20 new templates hold to every rule the procedural templates hold to.

Run: pytest tests/test_procedural_wide.py -q

References are the package's own trusted code, so they run in this process (one episode grades in the sandboxed
grader, as an environment grades it). The new templates' rows checked here are every one ``procedural_wide:train``
holds, and a seen test and validation draw of the new templates alone (their test-only and reserved pool values),
which the named splits, procedural's, never hold.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import gymnasium as gym
import pytest
from test_procedural_tasks import outputs
from test_procedural_tasks import test_row_format_and_reference as check_row_format_and_reference

import colbench_gym  # noqa: F401 - registers the environments
from colbench_gym.simulators.base import DONT_KNOW, SimulatorRequest
from colbench_gym.simulators.offline_backend import OfflineBackendSimulator
from colbench_gym.tasks import resolve_tasks
from colbench_gym.tasks.procedural import (
    SIGNATURE_MARKER,
    TRAIN_TEMPLATES,
    UNSEEN_TEMPLATES,
    VALIDATION_UNSEEN_TEMPLATES,
    WARM_START_TEMPLATES,
    load_procedural,
    task_part,
    template_clashes,
)
from colbench_gym.tasks.procedural_wide import EXTRA_TRAIN_TEMPLATES, PROCEDURAL_WIDE, load_procedural_wide

WIDE_TRAIN = load_procedural_wide("train")
NEW = {t.name: t for t in EXTRA_TRAIN_TEMPLATES}
PROCEDURAL_TEMPLATES = TRAIN_TEMPLATES + UNSEEN_TEMPLATES + VALIDATION_UNSEEN_TEMPLATES + WARM_START_TEMPLATES
NEW_TRAIN = [r for r in WIDE_TRAIN if r["template"] in NEW]
NEW_TEST = PROCEDURAL_WIDE.generate_tasks(2 * len(NEW), "test", templates=list(NEW))
NEW_VALIDATION = PROCEDURAL_WIDE.generate_tasks(2 * len(NEW), "validation", templates=list(NEW))
NEW_ROWS = NEW_TRAIN + NEW_TEST + NEW_VALIDATION


def values_of(row: dict[str, Any]) -> dict[str, Any]:
    """The hidden values a row of a new template was made from (searched among its split's combinations)."""
    template = NEW[row["template"]]
    split = row["task_id"].split("-")[1]
    for values in template.values_for(split):
        if template.row(values, split, "x")["ground_truth"] == row["ground_truth"]:
            return values
    raise AssertionError(f"{row['task_id']}: no values of its template make it")


# -- the splits ------------------------------------------------------------------------------------------------------

def test_the_train_split_draws_all_forty_templates():
    names = [t.name for t in PROCEDURAL_WIDE.train]
    assert len(names) == 40 and len(set(names)) == 40
    assert PROCEDURAL_WIDE.train[:20] == TRAIN_TEMPLATES and len(EXTRA_TRAIN_TEMPLATES) == 20
    assert len(WIDE_TRAIN) == 400
    counts = Counter(r["template"] for r in WIDE_TRAIN)
    assert set(counts) == set(names)
    assert min(counts[name] for name in NEW) >= 10  # every new template makes enough train tasks for its share
    # round-robin: max_train_tasks 40 holds one task of each template
    assert sorted(r["template"] for r in WIDE_TRAIN[:40]) == sorted(names)
    assert WIDE_TRAIN == PROCEDURAL_WIDE.generate_tasks(400, "train", seed=0)
    ids = [r["task_id"] for r in WIDE_TRAIN]
    assert len(set(ids)) == 400 and all(i.startswith("proc-train-seen-") for i in ids)
    assert [t.to_row() for t in resolve_tasks("procedural_wide:train")] == WIDE_TRAIN


@pytest.mark.parametrize("split", ["validation", "test", "warm_start"])
def test_every_other_split_is_procedurals_own(split):
    assert load_procedural_wide(split) == load_procedural(split)
    assert [t.to_row() for t in resolve_tasks(f"procedural_wide:{split}")] == \
        [t.to_row() for t in resolve_tasks(f"procedural:{split}")]
    assert not {r["template"] for r in load_procedural_wide(split)} & set(NEW)


def test_seen_and_unseen_parts_read_as_procedurals():
    parts = Counter(task_part(r["task_id"]) for r in load_procedural_wide("test"))
    assert parts == {"seen": 48, "unseen": 32}
    assert {task_part(r["task_id"]) for r in WIDE_TRAIN} == {None}
    assert PROCEDURAL_WIDE.task_part("proc-test-unseen-overtime_pay-0123abcd") == "unseen"


def test_bad_requests_are_refused_clearly():
    with pytest.raises(ValueError, match="unknown procedural_wide split 'dev'"):
        load_procedural_wide("dev")
    with pytest.raises(ValueError, match="procedural_wide tasks exist for the backend environment only"):
        resolve_tasks("procedural_wide:train", kind="frontend")
    with pytest.raises(FileNotFoundError, match="'<family>:<split>' for a task family.*'procedural_wide'"):
        resolve_tasks("procedural_widest:train")


# -- the new templates -----------------------------------------------------------------------------------------------

def test_the_new_templates_clash_with_nothing():
    assert template_clashes(EXTRA_TRAIN_TEMPLATES, PROCEDURAL_TEMPLATES) == []
    function = lambda t: t.code.split("(", 1)[0].removeprefix("def ").strip()
    for what in (lambda t: t.name, function, lambda t: t.request):
        assert len({what(t) for t in EXTRA_TRAIN_TEMPLATES}) == 20
    # a warm start may share nothing with the templates a split draws, the new ones included
    PROCEDURAL_WIDE.check_warm_start_pool(WARM_START_TEMPLATES)


@pytest.mark.parametrize("row", NEW_ROWS, ids=lambda r: r["task_id"])
def test_row_format_and_reference(row):
    """procedural's own checks: the row format, the reference passes its ten tests, two outputs or more."""
    check_row_format_and_reference(row)


@pytest.mark.parametrize("row", NEW_ROWS, ids=lambda r: r["task_id"])
def test_a_guessed_hidden_value_fails_a_test(row):
    """Every hidden value matters: any other value of its pool or of its reserved validation values fails a test."""
    template = NEW[row["template"]]
    values = values_of(row)
    expected = outputs(row["ground_truth"], row)
    for name, pool in template.pools.items():
        for other in dict.fromkeys([*pool, *template.validation_values.get(name, ())]):
            if other != values[name]:
                guess = template.code.format(**{**values, name: other})
                assert outputs(guess, row) != expected, \
                    f"guessing {name}={other!r} instead of {values[name]!r} passes every test"


def test_requests_state_no_hidden_value():
    """No value any row of a template may hide (of its pools or its reserved values) is in its request, which every
    row of it shows: numbers from 2 up as procedural's check reads them, and texts of two characters or more."""
    for template in EXTRA_TRAIN_TEMPLATES:
        assert all(r["problem_description"].rsplit(SIGNATURE_MARKER, 1)[0].strip() == template.request
                   for r in NEW_ROWS if r["template"] == template.name)
        for name, pool in template.pools.items():
            for value in (*pool, *template.validation_values.get(name, ())):
                if isinstance(value, (int, float)) and value >= 2:
                    assert str(value) not in template.request, (template.name, name, value)
                if isinstance(value, str) and len(value.strip()) >= 2 and value not in (">", ">="):
                    assert value not in template.request, (template.name, name, value)


def test_held_out_values_stay_held_out():
    """Train rows use no test-only value (every fourth of a pool) and no reserved validation value; test rows only
    test-only values; validation rows only reserved values. Pools with nothing reserved are two-way choices, and a
    numeric pool has eight values or more, so that its test-only quarter is two values or more."""
    for template in EXTRA_TRAIN_TEMPLATES:
        for name, pool in template.pools.items():
            if name not in template.validation_values:
                assert len(set(pool)) == 2, f"{template.name}: {name} reserves no validation values"
            elif all(isinstance(value, (int, float)) for value in pool):
                assert len(pool) >= 8, f"{template.name}: pool {name} too small to keep every fourth value for test"
    for row in NEW_TRAIN + NEW_TEST + NEW_VALIDATION:
        template, split = NEW[row["template"]], row["task_id"].split("-")[1]
        for name, value in values_of(row).items():
            reserved = template.validation_values.get(name)
            if reserved is None:
                continue
            test_only = set(template.pools[name][3::4])
            if split == "train":
                assert value not in test_only and value not in reserved, (row["task_id"], name, value)
            elif split == "test":
                assert value in test_only and value not in reserved, (row["task_id"], name, value)
            else:
                assert value in reserved, (row["task_id"], name, value)
    train_code = {r["ground_truth"] for r in NEW_TRAIN}
    assert not train_code & {r["ground_truth"] for r in NEW_TEST + NEW_VALIDATION}
    assert not {r["ground_truth"] for r in NEW_TEST} & {r["ground_truth"] for r in NEW_VALIDATION}


# -- the offline human and the environments -------------------------------------------------------------------------

OP_WORDS = {">": "more than", ">=": "at least"}


def said(value: Any, reply: str) -> bool:
    if isinstance(value, str) and value in OP_WORDS:
        return OP_WORDS[value] in reply
    if isinstance(value, (int, float)):
        return re.search(rf"(?<![\d.]){re.escape(str(value))}(?![\d])", reply) is not None
    return value in reply


@pytest.mark.parametrize("name", list(NEW))
def test_the_offline_human_describes_every_new_template(name):
    """Asked what the function returns, the human says the function in words, every hidden value in it."""
    row = next(r for r in NEW_TRAIN if r["template"] == name)
    task = resolve_tasks([row])[0]
    messages = [{"role": "user", "content": task.problem_description},
                {"role": "assistant", "content": "What should the function return?"}]
    reply = OfflineBackendSimulator().reply(SimulatorRequest(task, messages))
    assert reply.error is None and reply.text != DONT_KNOW
    assert all(said(value, reply.text) for value in values_of(row).values()), (values_of(row), reply.text)


def test_the_backend_environment_plays_the_wide_train_split():
    env = gym.make("ColBench-Backend-v0", tasks="procedural_wide:train")
    assert len(env.unwrapped.tasks) == 400
    observation, info = env.reset(seed=0)
    assert info["task_id"] in {r["task_id"] for r in WIDE_TRAIN} and isinstance(observation, str)
    index = next(i for i, r in enumerate(WIDE_TRAIN) if r["template"] in NEW)
    _, info = env.reset(options={"task_index": index})
    assert info["task_id"] == WIDE_TRAIN[index]["task_id"]
    _, reward, terminated, _, info = env.step("I WANT TO ANSWER:\n" + WIDE_TRAIN[index]["ground_truth"])
    assert terminated and reward == 1.0 and info["success"]
    env.close()


def test_the_frontend_environment_refuses_the_family():
    with pytest.raises(ValueError, match="procedural_wide tasks exist for the backend environment only"):
        gym.make("ColBench-Frontend-v0", tasks="procedural_wide:train")
