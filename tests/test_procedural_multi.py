"""The multi-fact procedural family: rows and splits, hidden details that each decide a test, an offline human that
tells only what is asked, and several-turn episodes through ``gym.make`` (no model; seconds).

Run: pytest tests/test_procedural_multi.py -q

References are the package's own trusted code, so they run in this process; the episodes grade in the sandboxed
grader as any environment does.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Any

import gymnasium as gym
import pytest

import colbench_gym  # noqa: F401 - registers the environments
from colbench_gym.envs.dialogue import ANSWER_MARKER
from colbench_gym.simulators.base import DONT_KNOW, SimulatorRequest
from colbench_gym.simulators.offline_backend import OfflineBackendSimulator
from colbench_gym.simulators.offline_backend.asked_facts import NOTHING_MORE, named_by
from colbench_gym.tasks import procedural, procedural_multi, resolve_tasks
from colbench_gym.tasks.procedural import SIGNATURE_MARKER, task_part, template_clashes
from colbench_gym.tasks.procedural_multi import (
    GENERAL_QUESTION,
    TRAIN_TEMPLATES,
    UNSEEN_TEMPLATES,
    VALIDATION_UNSEEN_TEMPLATES,
    WARM_START_TEMPLATES,
    Detail,
    FactTemplate,
    Outline,
    generate_tasks,
    load_procedural_multi,
)

SPLITS = {name: load_procedural_multi(name) for name in ("train", "validation", "test", "warm_start")}
ALL_TEMPLATES = TRAIN_TEMPLATES + UNSEEN_TEMPLATES + VALIDATION_UNSEEN_TEMPLATES + WARM_START_TEMPLATES
BY_NAME = {t.name: t for t in ALL_TEMPLATES}
GENERIC_QUESTIONS = ("Can you tell me more?", "What should the function do?", "Anything else?",
                     "Are there any other requirements?", "Could you describe how it should work?", "Hi!",
                     "What should it return?")


def run_call(source: str, call: str) -> Any:
    namespace: dict[str, Any] = {}
    exec(compile(source, "<reference>", "exec"), namespace)  # noqa: S102 - our own generated references
    try:
        return eval(compile(call, "<test>", "eval"), namespace)
    except Exception as err:  # noqa: BLE001 - a crash is an output that no reference gives
        return ("raised", type(err).__name__)


def outputs(source: str, row: dict[str, Any]) -> list[Any]:
    return [run_call(source, call) for call in row["test_cases"].values()]


def values_of(row: dict[str, Any]) -> dict[str, Any]:
    """The hidden values a row was made from (searched among its template's combinations)."""
    template = BY_NAME[row["template"]]
    pools = {name: [*pool, *template.validation_values.get(name, ())] for name, pool in template.pools.items()}
    for combo in itertools.product(*pools.values()):
        values = dict(zip(pools, combo))
        if template.code.format(**values).strip() + "\n" == row["ground_truth"]:
            return values
    raise AssertionError(f"{row['task_id']}: no values of its template make it")


def ask(row: dict[str, Any], *questions: str) -> list[str]:
    """The offline human's replies to the agent's questions, one after another, as the environment asks them."""
    task = resolve_tasks([row])[0]
    human = OfflineBackendSimulator()
    messages = [{"role": "user", "content": row["problem_description"]}]
    replies = []
    for question in questions:
        messages.append({"role": "assistant", "content": question})
        reply = human.reply(SimulatorRequest(task, list(messages)))
        assert reply.error is None, reply.error
        messages.append({"role": "user", "content": reply.text})
        replies.append(reply.text)
    return replies


def first_row(template: FactTemplate) -> dict[str, Any]:
    for rows in SPLITS.values():
        for row in rows:
            if row["template"] == template.name:
                return row
    return template.row({name: pool[0] for name, pool in template.pools.items()}, "train", "seen")


# -- rows and splits ------------------------------------------------------------------------------------------------

def test_sizes_templates_parts_and_ids():
    assert len(TRAIN_TEMPLATES) >= 20 and len(UNSEEN_TEMPLATES) >= 5 and len(VALIDATION_UNSEEN_TEMPLATES) >= 5
    assert len(WARM_START_TEMPLATES) >= 10
    assert [len(SPLITS[s]) for s in SPLITS] == [400, 80, 80, 400]
    assert {r["template"] for r in SPLITS["train"]} == {t.name for t in TRAIN_TEMPLATES}
    assert {r["template"] for r in SPLITS["warm_start"]} == {t.name for t in WARM_START_TEMPLATES}
    for split, unseen in (("test", UNSEEN_TEMPLATES), ("validation", VALIDATION_UNSEEN_TEMPLATES)):
        rows = SPLITS[split]
        parts = [task_part(r["task_id"]) for r in rows]
        assert parts.count("seen") == 48 and parts.count("unseen") == 32
        assert [task_part(r["task_id"]) for r in rows[:20]].count("unseen") == 8  # a prefix keeps the proportion
        assert {r["template"] for r in rows if task_part(r["task_id"]) == "unseen"} == {t.name for t in unseen}
        assert all(r["task_id"].startswith(f"multi-{split}-{task_part(r['task_id'])}-{r['template']}-") for r in rows)
    assert all(r["task_id"].startswith("multi-train-seen-") for r in SPLITS["train"])
    assert all(r["task_id"].startswith("multi-warm-start-") for r in SPLITS["warm_start"])
    ids = [r["task_id"] for rows in SPLITS.values() for r in rows]
    ids += [r["task_id"] for s in ("train", "validation", "test", "warm_start") for r in procedural.load_procedural(s)]
    assert len(set(ids)) == len(ids)


def test_the_splits_load_by_name_and_are_deterministic_for_a_seed():
    assert [t.to_row() for t in resolve_tasks("procedural_multi:test")] == SPLITS["test"]
    assert len(resolve_tasks("procedural_multi:warm_start")) == 400
    assert load_procedural_multi("train") == SPLITS["train"]
    assert generate_tasks(30, "test", seed=3) == generate_tasks(30, "test", seed=3)
    assert generate_tasks(30, "test", seed=3) != generate_tasks(30, "test", seed=4)
    assert generate_tasks(30, "validation", seed=1) != generate_tasks(30, "validation", seed=2)
    assert procedural_multi.warm_start_tasks(20, seed=1) == procedural_multi.warm_start_tasks(20, seed=1)
    with pytest.raises(ValueError, match="unknown procedural_multi split 'dev'"):
        load_procedural_multi("dev")
    with pytest.raises(ValueError, match="backend environment only"):
        resolve_tasks("procedural_multi:train", kind="frontend")
    with pytest.raises(ValueError, match=r"\['checkout_fee'\] are unseen templates of another split"):
        generate_tasks(3, "validation", templates=["checkout_fee"])
    with pytest.raises(ValueError, match="never appear in the train split"):
        generate_tasks(3, "train", templates="unseen")
    with pytest.raises(ValueError, match="unknown procedural_multi templates"):
        generate_tasks(3, "train", templates=["late_fee"])  # a template of the other family


def test_held_out_values_and_templates():
    """No validation or test task of a seen template has a train task's hidden values (validation's are values no
    test task has either), and each split's unseen templates are its own: no name, function or request shared
    with another split, the warm-start pool or the procedural family."""
    def combos(split: str, part: str) -> set[tuple[str, tuple[Any, ...]]]:
        return {(r["template"], tuple(values_of(r).items())) for r in SPLITS[split]
                if (task_part(r["task_id"]) or "seen") == part}

    train = combos("train", "seen")
    assert not train & combos("test", "seen") and not train & combos("validation", "seen")
    assert not combos("test", "seen") & combos("validation", "seen")
    for row in SPLITS["validation"]:
        if task_part(row["task_id"]) == "seen":
            template, values = BY_NAME[row["template"]], values_of(row)
            assert any(values[name] in reserved for name, reserved in template.validation_values.items())
    groups = [TRAIN_TEMPLATES, UNSEEN_TEMPLATES, VALIDATION_UNSEEN_TEMPLATES, WARM_START_TEMPLATES]
    for mine, theirs in itertools.combinations(groups, 2):
        assert template_clashes(mine, theirs) == []
    assert template_clashes(ALL_TEMPLATES, procedural.PROCEDURAL.held_out + procedural.WARM_START_TEMPLATES) == []
    assert all(t.validation_values for t in TRAIN_TEMPLATES)


@pytest.mark.parametrize("split", list(SPLITS))
def test_row_format(split):
    for row in SPLITS[split]:
        template = BY_NAME[row["template"]]
        assert row["hidden_information"] == row["ground_truth"]
        assert list(row["test_cases"]) == [f"test{i}" for i in range(1, 11)]
        assert row["problem_description"].rsplit(SIGNATURE_MARKER, 1)[1] == row["ground_truth"].splitlines()[0][:-1]
        assert row["reveal"] == "asked_facts_only"
        facts = row["hidden_facts"]
        assert 2 <= len(facts) <= 3 and [f["detail"] for f in facts] == [d.pool for d in template.details]
        assert all(f["fact"] and f["asked_by"] for f in facts)
        assert row["ground_truth"] not in " ".join(f["fact"] for f in facts)
        request = row["problem_description"].rsplit(SIGNATURE_MARKER, 1)[0]
        for value in values_of(row).values():
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 2:
                assert str(value) not in request, row["task_id"]


# -- every hidden detail decides a test ---------------------------------------------------------------------------

def _rows_of(template: FactTemplate, per_split: int = 4) -> list[dict[str, Any]]:
    rows = [r for split_rows in SPLITS.values() for r in
            [r for r in split_rows if r["template"] == template.name][:per_split]]
    assert rows, template.name
    return rows


@pytest.mark.parametrize("template", ALL_TEMPLATES, ids=lambda t: t.name)
def test_the_reference_passes_and_missing_any_one_fact_fails(template):
    """The reference's outputs are real (no None, not all alike); replacing any one detail's value with any other
    value of its pool or of its reserved validation values (a guess instead of asking) changes some output."""
    for row in _rows_of(template):
        values = values_of(row)
        expected = outputs(row["ground_truth"], row)
        assert all(o is not None and not (isinstance(o, tuple) and o[:1] == ("raised",)) for o in expected)
        assert len({repr(o) for o in expected}) >= 2
        for name, pool in template.pools.items():
            for other in dict.fromkeys([*pool, *template.validation_values.get(name, ())]):
                if other != values[name]:
                    guess = template.code.format(**{**values, name: other})
                    assert outputs(guess, row) != expected, f"{row['task_id']}: {name}={other!r} passes every test"


# -- the human tells only what is asked ---------------------------------------------------------------------------

@pytest.mark.parametrize("template", ALL_TEMPLATES, ids=lambda t: t.name)
def test_a_question_gets_the_facts_it_names_and_no_other(template):
    row = first_row(template)
    facts = [f["fact"] for f in row["hidden_facts"]]
    for fact in row["hidden_facts"]:
        for phrase in fact["asked_by"]:
            (reply,) = ask(row, f"Quick question about the {phrase.replace('#', '18')}, please.")
            assert reply == fact["fact"], (row["task_id"], phrase, reply)
            assert not [f for f in facts if f != fact["fact"] and f in reply]
    every = " And ".join(f"what about the {f['asked_by'][0]}?" for f in row["hidden_facts"])
    (reply,) = ask(row, every)
    assert reply == " ".join(facts)


@pytest.mark.parametrize("template", ALL_TEMPLATES, ids=lambda t: t.name)
def test_a_general_question_gets_the_outline_first_then_one_fact_at_most(template):
    row = first_row(template)
    facts = [f["fact"] for f in row["hidden_facts"]]
    outline = row["outline"]
    assert outline == template.outline.says() and not [f for f in facts if f in outline]
    for question in GENERIC_QUESTIONS:
        (reply,) = ask(row, question)
        assert reply == (DONT_KNOW if question == "Hi!" else outline), (question, reply)
    # asked again and again, the human says the outline, then one untold fact each time, then that there is no more
    replies = ask(row, *["Anything else?"] * (len(facts) + 2))
    assert replies == [outline, *facts, NOTHING_MORE]
    assert ask(row, "Should it print anything?", "") == [DONT_KNOW, DONT_KNOW]
    # a question naming a detail gets its fact and not the outline; a general one after it, the outline
    first = row["hidden_facts"][0]
    assert ask(row, _question_for(first), "What should the function do?") == [first["fact"], outline]


@pytest.mark.parametrize("template", ALL_TEMPLATES, ids=lambda t: t.name)
def test_asking_by_the_outlines_names_gets_each_detail(template):
    row = first_row(template)
    for fact in row["hidden_facts"]:
        name = template.outline.names[fact["detail"]]
        assert name in row["outline"]
        assert ask(row, f"What is {name}?") == [fact["fact"]], (row["task_id"], name)
    question = template.outline.detail_question([d.pool for d in template.details])
    assert ask(row, GENERAL_QUESTION, question) == [row["outline"], " ".join(f["fact"] for f in row["hidden_facts"])]


def test_the_procedural_family_is_answered_as_before():
    """Rows without ``reveal`` get the reference-reading human: one question there still gets the whole rule."""
    row = procedural.load_procedural("train")[8]  # parking_fee: a minimum and a rate
    task = resolve_tasks([row])[0]
    human = OfflineBackendSimulator()
    request = SimulatorRequest(task, [{"role": "user", "content": row["problem_description"]},
                                      {"role": "assistant", "content": "What is the hourly rate?"}])
    assert human.reply(request).text == human.answer(row["hidden_information"], "What is the hourly rate?")
    assert "larger of" in human.reply(request).text


def test_a_malformed_reveal_row_is_an_error_reply_not_a_crash():
    row = dict(SPLITS["train"][0])
    for changes, message in (({"reveal": "everything"}, "unknown reveal 'everything'"),
                             ({"hidden_facts": []}, "hidden_facts must be a non-empty list"),
                             ({"hidden_facts": [{"detail": "x", "fact": "It is 3."}]}, "'asked_by' must be"),
                             ({"outline": ["not", "a", "text"]}, "outline must be a text")):
        task = resolve_tasks([{**row, **changes}])[0]
        reply = OfflineBackendSimulator().reply(SimulatorRequest(task, [
            {"role": "user", "content": row["problem_description"]}, {"role": "assistant", "content": "Rate?"}]))
        assert reply.text == DONT_KNOW and message in reply.error


def test_phrases_match_on_word_stems_in_order():
    assert named_by("How is it rounded?", "round") and named_by("Rounding?", "round")
    assert named_by("Does exactly 18 count?", "exactly #") and not named_by("What exactly is it?", "exactly #")
    assert named_by("Is it >= or >?", ">=") and named_by("What is the fee per day?", "per day")
    assert not named_by("What is the day's fee per visit?", "per day")


def test_a_template_that_would_tell_too_much_is_refused():
    base = TRAIN_TEMPLATES[0]  # library_fine: grace, rate, cap
    with pytest.raises(ValueError, match=r"its request names \['cap'\]"):
        dataclasses.replace(base, request="Our library fines late books, up to a maximum. Write it.")
    rate, cap = base.details[1], base.details[2]
    with pytest.raises(ValueError, match=r"'cap' is asked for by \['daily cap'\], which also name 'rate'"):
        dataclasses.replace(base, details=(base.details[0], rate, dataclasses.replace(cap, asked_by=("daily cap",))))
    outline = base.outline
    with pytest.raises(ValueError, match=r"calls 'rate' 'the daily maximum', which names \['rate', 'cap'\]"):
        dataclasses.replace(base, outline=Outline(outline.text, {**outline.names, "rate": "the daily maximum"}))
    with pytest.raises(ValueError, match=r"calls 'cap' 'the ceiling of the fine', which names \[\]|never names"):
        dataclasses.replace(base, outline=Outline(outline.text.replace("{cap}", "twenty"), outline.names))
    with pytest.raises(ValueError, match="the outline does not fill in"):
        dataclasses.replace(base, outline=Outline(outline.text + " {limit}", outline.names))
    with pytest.raises(ValueError, match="no outline"):
        dataclasses.replace(base, outline=None)
    with pytest.raises(ValueError, match="1 details, expected 2 to 3"):
        FactTemplate("x", "A request.", "def x(a):\n    return a * {k}", {"k": (1, 2)}, lambda v: [],
                     details=(Detail("k", "It is {value}.", ("k",)),))
    with pytest.raises(ValueError, match="must be its pools"):
        dataclasses.replace(base, details=(base.details[0], rate, dataclasses.replace(cap, pool="limit")))


# -- episodes through gym.make ----------------------------------------------------------------------------------------

def _question_for(fact: dict[str, Any]) -> str:
    return f"What is the {fact['asked_by'][0]}?"


def _never_shows_the_reference(observation: str, reference: str) -> None:
    assert reference.strip() not in observation
    for line in reference.splitlines()[1:]:
        assert line.strip() not in observation, line


def test_asking_fact_by_fact_then_answering_with_the_reference_succeeds():
    env = gym.make("ColBench-Backend-v0", tasks="procedural_multi:train", max_turns=5)
    for index in (0, 1, 6):  # library_fine, ticket_price, invoice_number: three facts each
        observation, info = env.reset(options={"task_index": index})
        row = SPLITS["train"][index]
        assert len(row["hidden_facts"]) == 3
        for turn, fact in enumerate(row["hidden_facts"], 1):
            observation, reward, terminated, truncated, info = env.step(_question_for(fact))
            assert (reward, terminated, truncated) == (0.0, False, False)
            assert info["messages"][-1] == {"role": "user", "content": fact["fact"]}
            assert info["privileged"]["hidden_information"] == row["ground_truth"]
            _never_shows_the_reference(observation, row["ground_truth"])
        observation, reward, terminated, truncated, info = env.step(f"{ANSWER_MARKER}\n{row['ground_truth']}")
        assert terminated and reward == 1.0 and info["success"] and info["turn"] == 4, row["task_id"]
    env.close()


def test_one_question_then_a_one_fact_guess_fails():
    env = gym.make("ColBench-Backend-v0", tasks="procedural_multi:train", max_turns=5)
    row = SPLITS["train"][0]
    env.reset(options={"task_id": row["task_id"]})
    asked = row["hidden_facts"][0]
    _, _, _, _, info = env.step(_question_for(asked))
    assert info["messages"][-1]["content"] == asked["fact"]
    template, values = BY_NAME[row["template"]], values_of(row)
    # what is known is the asked fact; the others are guessed (the first other value of each pool)
    guess = {**values, **{name: next(v for v in pool if v != values[name])
                          for name, pool in template.pools.items() if name != asked["detail"]}}
    _, reward, terminated, _, info = env.step(f"{ANSWER_MARKER}\n{template.code.format(**guess)}")
    assert terminated and not info["success"] and reward < 1.0
    env.close()


def test_five_turns_without_an_answer_end_unanswered_and_nothing_is_forced():
    env = gym.make("ColBench-Backend-v0", tasks="procedural_multi:validation", max_turns=5)
    observation, _ = env.reset(options={"task_index": 3})
    row = SPLITS["validation"][3]
    for turn in range(1, 6):
        observation, reward, terminated, truncated, info = env.step("Anything else?")
        _never_shows_the_reference(observation, row["ground_truth"])
    assert truncated and not terminated and reward == 0.0 and info["outcome"] == "no_answer"
    assert ANSWER_MARKER not in " ".join(m["content"] for m in info["messages"] if m["role"] == "assistant")
    env.close()


# -- the warm start ---------------------------------------------------------------------------------------------------

def test_warm_start_questions_the_outline_then_every_detail_and_fitted_to_the_turns():
    from sweet_trl.warm_start import expert_questions, question_turns

    row = SPLITS["warm_start"][0]
    template = BY_NAME[row["template"]]
    questions = expert_questions(row)
    assert questions == (GENERAL_QUESTION, template.outline.detail_question([d.pool for d in template.details]))
    assert ask(row, *questions) == [row["outline"], " ".join(f["fact"] for f in row["hidden_facts"])]
    assert question_turns(questions, 5) == list(questions) == question_turns(questions, 3)
    assert question_turns(questions, 2) == [" ".join(questions)] and question_turns(questions, 1) == []
    single = procedural.load_procedural("warm_start")[0]  # the procedural pool: one question, as before
    assert expert_questions(single) == (procedural.warm_start_template(single["template"]).question,)
    assert question_turns(expert_questions(single), 2) == list(expert_questions(single))
    with pytest.raises(ValueError, match="not from the warm-start pool"):
        expert_questions(SPLITS["train"][0])


def test_every_expert_plan_gets_every_fact_in_its_own_order_and_grouping():
    from sweet_trl.warm_start import expert_plans, expert_questions

    for template in WARM_START_TEMPLATES:
        row = first_row(template)
        plans = expert_plans(row)
        names = [template.outline.names[d.pool] for d in template.details]
        # every order of the details, each cut into consecutive groups in every way: n! * 2^(n-1) distinct plans
        assert len(plans) == len(set(plans)) == math.factorial(len(names)) * 2 ** (len(names) - 1)
        assert plans[0] == expert_questions(row)
        assert {len(plan) for plan in plans} == set(range(2, len(names) + 2))
        for plan in plans:
            assert plan[0] == GENERAL_QUESTION
            assert sorted(n for question in plan[1:] for n in names if n in question) == sorted(names)
        for plan in (plans[0], plans[-1], max(plans, key=len)):
            replies = ask(row, *plan)
            assert replies[0] == row["outline"]
            assert all(f["fact"] in " ".join(replies[1:]) for f in row["hidden_facts"])


def test_varied_expert_dialogues_draw_forms_that_fit_the_turns_and_all_succeed():
    from sweet_trl.warm_start import dialogue_summary, expert_dialogues

    def questions(records: list[dict[str, Any]]) -> list[tuple[str, ...]]:
        return [tuple(m["content"] for m in r["dialogue_history"] if m["role"] == "assistant")[:-1] for r in records]

    rows = SPLITS["warm_start"][:24]
    asked = {}
    for max_turns in (5, 3):
        records = expert_dialogues(rows, max_turns=max_turns, forms="varied", seed=1)
        assert dialogue_summary(records)["success_rate"] == 1.0
        asked[max_turns] = questions(records)
    assert {len(q) for q in asked[5]} == {2, 3, 4}  # the details in one question, or two, or three
    assert {len(q) for q in asked[3]} == {2}  # only the forms that leave the last turn to the answer
    assert len(set(asked[3])) > 1  # the order of the details still varies
    assert questions(expert_dialogues(rows, max_turns=5, forms="varied", seed=1)) == asked[5]  # seeded
    assert questions(expert_dialogues(rows, max_turns=5, forms="varied", seed=2)) != asked[5]
    with pytest.raises(ValueError, match="forms must be"):
        expert_dialogues(rows[:1], max_turns=5, forms="all")


@pytest.mark.parametrize("max_turns", [5, 2])
def test_expert_dialogues_on_the_multi_fact_pool_succeed(max_turns):
    """The expert asks for the outline, then for every detail (with two turns, in one message), hears every fact,
    and its answer passes every test."""
    from sweet_trl.warm_start import dialogue_summary, expert_dialogues

    rows = [next(r for r in SPLITS["warm_start"] if r["template"] == t.name) for t in WARM_START_TEMPLATES]
    records = expert_dialogues(rows, max_turns=max_turns)
    assert dialogue_summary(records) == {"episodes": len(rows), "successes": len(rows), "success_rate": 1.0,
                                         "dont_know_replies": 0}
    for row, record in zip(rows, records):
        history = record["dialogue_history"]
        agent = [m["content"] for m in history if m["role"] == "assistant"]
        replies = " ".join(m["content"] for m in history[1:] if m["role"] == "user")
        assert len(agent) == (3 if max_turns == 5 else 2)
        assert all(f["fact"] in replies for f in row["hidden_facts"])
        assert (row["outline"] in replies) == (max_turns == 5)  # one message naming details gets only the facts
        assert agent[-1].startswith(f"{ANSWER_MARKER}\n```python\ndef ")
