"""Multi-fact procedural backend tasks: functions with two or three hidden details, each told only when asked for.

In the procedural family (:mod:`colbench_gym.tasks.procedural`) one question decides an episode: the offline human
answers a question that names any fact with the whole function in words. Here every task hides two or three
independent details (a rate AND a rounding AND a cap; a threshold AND which side of it is inclusive AND a label),
the ten tests straddle every hidden value, so a function that misses any one detail fails at least one test
(success = every test passes), and the offline human says only what is asked: a question gets one fact per detail
it names; the first general question ("what should the function do?", "anything else?") gets the template's outline,
the function in words with every detail named and none valued ("If days_late is at most the free days, the result
is 0. Otherwise ... the daily rate ... the cap."), a later one at most one fact; anything else "I don't know." So an
agent needs two questions or more before it answers (the outline, then the details by their names, together or one
a turn), and it writes the function by filling the told values into the outline: which of its turns earned the
success is what SWEET-RL's turn-level credit is for.

Splits, deterministic for a seed::

    import gymnasium as gym
    import colbench_gym
    env = gym.make("ColBench-Backend-v0", tasks="procedural_multi:train", max_turns=5)       # 400 tasks
    env = gym.make("ColBench-Backend-v0", tasks="procedural_multi:validation", max_turns=5)  # 80 tasks
    env = gym.make("ColBench-Backend-v0", tasks="procedural_multi:test", max_turns=5)        # 80 tasks
    env = gym.make("ColBench-Backend-v0", tasks="procedural_multi:warm_start", max_turns=5)  # 400 tasks

    from colbench_gym.tasks.procedural_multi import generate_tasks
    rows = generate_tasks(count=50, split="test", seed=3, templates="unseen")

Train draws from 20 templates (:data:`TRAIN_TEMPLATES`); validation and test each hold 48 tasks of those templates
and 32 of 6 unseen templates of their own, interleaved so that any prefix keeps the proportion; the warm start draws
from 12 templates of its own. 18 of the 20 train templates hide three details, 2 hide two.

The environment never forces an answer: an episode ends when the agent writes ``I WANT TO ANSWER:`` or after
``max_turns`` messages without one (reward 0); five turns leave room for the general question, three questions, one
per detail, and the answer. (``force_answer_on_last_turn`` of sweet_trl's generation settings is a scaffold for
small policies that starts the last turn's answer for them; it stays off unless a configuration turns it on.)

Rows are ColBench rows (``problem_description``, ``ground_truth``, ``hidden_information`` = the reference,
``test_cases``) with ``template``, task ids ``multi-<split>-<seen|unseen>-<template>-<digest>`` (warm start:
``multi-warm-start-...``) and two fields that select the offline human's behaviour
(:mod:`colbench_gym.simulators.offline_backend.asked_facts`): ``"reveal": "asked_facts_only"`` and
``hidden_facts``, one ``{"detail", "fact", "asked_by"}`` per hidden detail, the sentence the human says and the
phrases that ask for it; and ``outline``, the function in words with the details named. The reference stays in
``info["privileged"]``; the human's replies are the outline and the facts' sentences, never the code. A model-backed
human (``OpenAISimulator``) is given the reference and does not read ``reveal``.

Held out as in the procedural family: the test split's seen part uses hidden values no train task uses (every fourth
value of each pool), the validation split's seen part values that each train template reserves for it
(``validation_values``, outside its pools), and each of the two has unseen templates of its own
(:data:`UNSEEN_TEMPLATES`, :data:`VALIDATION_UNSEEN_TEMPLATES`) that share no name, function or request with any
other template of either family. The warm-start pool (:data:`WARM_START_TEMPLATES`, ``procedural_multi:warm_start``)
is a fourth set of templates (:func:`sweet_trl.warm_start.expert_dialogues` asks the general question, then every
detail by the outline's names in one question, then answers with the reference; with ``expert_forms="varied"`` each
dialogue asks for the details in an order and grouping of its own, :meth:`FactTemplate.expert_plans`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from colbench_gym.simulators.offline_backend.asked_facts import (
    ASKED_FACTS_ONLY,
    FACTS_FIELD,
    OUTLINE_FIELD,
    REVEAL_FIELD,
    HiddenFact,
    asks_in_general,
    named_facts,
    phrase_tokens,
)
from colbench_gym.simulators.offline_backend.phrasing import and_list
from colbench_gym.tasks.procedural import Split, TaskFamily, Template
from colbench_gym.tasks.procedural import _around as around
from colbench_gym.tasks.procedural import _calls as calls

MIN_DETAILS, MAX_DETAILS = 2, 3


def quoted(value: Any) -> str:
    """A text value as the human says it: in quotes, or "nothing" for the empty text."""
    return "nothing" if value == "" else repr(value)


@dataclass(frozen=True)
class Detail:
    """One hidden detail of a multi-fact template: the pool it draws from, what the human says of its value, and
    the phrases that ask for it.

    ``fact`` is a :meth:`str.format` template over ``value`` (and ``quoted``, the value as text in quotes), a
    mapping from each value to its sentence (for a choice such as ``>`` / ``>=``), or a function of the value. It
    states this detail's value only, so that no answer gives away another detail. ``asked_by`` are the phrases a
    question names the detail with (matched as :func:`~colbench_gym.simulators.offline_backend.asked_facts.named_by`
    does).
    """

    pool: str
    fact: str | Mapping[Any, str] | Callable[[Any], str]
    asked_by: tuple[str, ...]

    def says(self, value: Any) -> str:
        if isinstance(self.fact, Mapping):
            return self.fact[value]
        if callable(self.fact):
            return self.fact(value)
        return self.fact.format(value=value, quoted=quoted(value))


GENERAL_QUESTION = "What should the function do?"


@dataclass(frozen=True)
class Outline:
    """What a template's function does, in the words the procedural family's human speaks code in, with every hidden
    detail named and none valued: the first reply to a general question.

    ``text`` is a :meth:`str.format` template over the template's pools; ``names`` gives each pool the words the
    outline calls it by, words that ask for that detail and no other. So an agent learns from the outline what to ask
    ("What is the daily rate?") and, once told the values, writes the function by filling them in.
    """

    text: str
    names: Mapping[str, str]

    def says(self) -> str:
        return self.text.format(**self.names)

    def detail_question(self, pools: Sequence[str]) -> str:
        """One question that names every detail of ``pools``, by the outline's names."""
        return f"What is {and_list([self.names[pool] for pool in pools])}?"


@dataclass(frozen=True)
class FactTemplate(Template):
    """A :class:`~colbench_gym.tasks.procedural.Template` whose every pool is a hidden detail the human tells only
    when asked (:class:`Detail`); its rows carry the facts and select that behaviour of the offline human.

    Checked at construction: two or three details, one per pool; no phrase of one detail occurs in a phrase of
    another (a question naming one would get both); neither the request nor the signature names a detail (an agent
    that repeats the request learns nothing); a sentence for every value of every pool; and an outline that names
    every detail, each by words that name it and no other, and that a general question gets.
    """

    details: tuple[Detail, ...] = ()
    outline: Outline | None = None
    id_prefix: ClassVar[str] = "multi"

    def __post_init__(self) -> None:
        super().__post_init__()
        where = f"template {self.name}"
        if not MIN_DETAILS <= len(self.details) <= MAX_DETAILS:
            raise ValueError(f"{where}: {len(self.details)} details, expected {MIN_DETAILS} to {MAX_DETAILS}")
        if sorted(d.pool for d in self.details) != sorted(self.pools):
            raise ValueError(f"{where}: details {[d.pool for d in self.details]} must be its pools {list(self.pools)}, "
                             "one each")
        for detail in self.details:
            if not detail.asked_by or not all(phrase_tokens(p) for p in detail.asked_by):
                raise ValueError(f"{where}: detail {detail.pool!r} needs phrases that ask for it")
            for value in dict.fromkeys([*self.pools[detail.pool], *self.validation_values.get(detail.pool, ())]):
                if not detail.says(value).strip():
                    raise ValueError(f"{where}: detail {detail.pool!r} says nothing of {value!r}")
        facts = self.hidden_facts({d.pool: self.pools[d.pool][0] for d in self.details})
        for mine in facts:
            for other in facts:
                overlap = [p for p in other.asked_by if mine is not other and named_facts([mine], p)]
                if overlap:
                    raise ValueError(f"{where}: {other.detail!r} is asked for by {overlap}, which also name "
                                     f"{mine.detail!r}: a question with them would get both")
        signature = self.code.splitlines()[0]
        for text, what in ((self.request, "request"), (signature, "signature")):
            told = [f.detail for f in named_facts(facts, text)]
            if told:
                raise ValueError(f"{where}: its {what} names {told}: an agent repeating it would be told them")
        self._check_outline(facts, where)

    def _check_outline(self, facts: Sequence[HiddenFact], where: str) -> None:
        if self.outline is None:
            raise ValueError(f"{where}: no outline (what a general question is told)")
        pools = [d.pool for d in self.details]
        if sorted(self.outline.names) != sorted(pools):
            raise ValueError(f"{where}: the outline names {sorted(self.outline.names)}, its details are {pools}")
        try:
            said = self.outline.says()
        except (KeyError, IndexError, ValueError) as err:
            raise ValueError(f"{where}: the outline does not fill in ({err!r}); its fields are the pools") from err
        for pool, name in self.outline.names.items():
            named = [f.detail for f in named_facts(facts, name)]
            if named != [pool]:
                raise ValueError(f"{where}: the outline calls {pool!r} {name!r}, which names {named}: an agent "
                                 "asking by that name must be told that detail and no other")
        missing = [pool for pool in pools if self.outline.names[pool] not in said]
        if missing:
            raise ValueError(f"{where}: the outline never names {missing}")
        if named_facts(facts, GENERAL_QUESTION) or not asks_in_general(GENERAL_QUESTION):
            raise ValueError(f"{where}: {GENERAL_QUESTION!r} must ask in general and name no detail")

    def hidden_facts(self, values: Mapping[str, Any]) -> list[HiddenFact]:
        return [HiddenFact(d.pool, d.says(values[d.pool]), d.asked_by) for d in self.details]

    def expert_questions(self) -> tuple[str, ...]:
        """The warm-start expert's questions, one a turn: the general question (the outline comes back), then one
        question that names every detail by the outline's names."""
        return self.expert_plans()[0]

    def expert_plans(self) -> tuple[tuple[str, ...], ...]:
        """Every way the warm-start expert may ask, each a tuple of questions (one a turn) that gets every fact:
        the general question first (the outline names the details), then the details by the outline's names, in
        any order, grouped in any way: all in one question, one a question, or any split between. The first is
        :meth:`expert_questions`. They differ in turns spent, which only matters when turns run short: what to
        ask under the turn limit is left to what the policy learns, not taught."""
        assert self.outline is not None
        outline = self.outline
        plans: list[tuple[str, ...]] = []
        for order in itertools.permutations([d.pool for d in self.details]):
            for cuts in itertools.product((False, True), repeat=len(order) - 1):  # cut after detail i or not
                groups, group = [], [order[0]]
                for pool, cut in zip(order[1:], cuts):
                    if cut:
                        groups.append(group)
                        group = []
                    group.append(pool)
                plans.append((GENERAL_QUESTION, *(outline.detail_question(g) for g in [*groups, group])))
        return tuple(plans)

    def row(self, values: dict[str, Any], split: Split, part: str) -> dict[str, Any]:
        row = super().row(values, split, part)
        row[REVEAL_FIELD] = ASKED_FACTS_ONLY
        row[FACTS_FIELD] = [{"detail": f.detail, "fact": f.fact, "asked_by": list(f.asked_by)}
                            for f in self.hidden_facts(values)]
        assert self.outline is not None
        row[OUTLINE_FIELD] = self.outline.says()
        return row


def multi(name: str, request: str, code: str, calls_of: Any, *details: tuple[Detail, Sequence[Any]],
          outline: Outline, validation: dict[str, Sequence[Any]] | None = None) -> FactTemplate:
    """A template from its details, each given with its pool (the details' order is the facts' order)."""
    return FactTemplate(name, request, code, {d.pool: pool for d, pool in details}, calls_of,
                        validation_values=validation or {}, details=tuple(d for d, _ in details), outline=outline)


# Phrases that ask for kinds of detail many templates share; a template adds its own words.
ROUNDING = ("round", "decimal", "digit", "precision", "cent", "whole number", "integer")
INCLUSIVE = ("inclusive", "exclusive", "include", "equal", "boundary", "strictly", ">=", "<=", "exactly #",
             "exactly at", "exactly on", "or more", "or above", "or higher", "or over", "or less", "or below",
             "or under")
CAP = ("cap", "maximum", "max", "most", "ceiling", "highest", "upper limit", "no more than")
MINIMUM = ("minimum", "min", "lowest", "smallest", "at least", "no less than")
CASE = ("case", "capital", "uppercase", "lowercase", "upper", "lower", "capitalize", "capitalise")


def digits_fact(noun: str) -> dict[int, str]:
    """Sentences for a rounding to 0-4 decimal places."""
    return {0: f"{noun} is rounded to a whole number.", 1: f"{noun} is rounded to 1 decimal place.",
            **{n: f"{noun} is rounded to {n} decimal places." for n in (2, 3, 4)}}


def side(at: str, inside: str, outside: str) -> Mapping[str, str]:
    """Sentences for which side of a threshold its own value is on, for ``<``/``<=``/``>``/``>=``."""
    return {">=": f"{at} {inside}.", "<=": f"{at} {inside}.", ">": f"{at} {outside}.", "<": f"{at} {outside}."}


CASE_FACT = {"title": "is written in title case (every word capitalised)", "upper": "is written in capitals",
             "lower": "is written in lower case", "capitalize": "has a capital first letter and the rest in lower case",
             "swapcase": "has the case of every letter swapped"}


def case_fact(noun: str) -> dict[str, str]:
    """Sentences for the string methods that change case."""
    return {case: f"{noun} {said}." for case, said in CASE_FACT.items()}


# fmt: off
TRAIN_TEMPLATES: tuple[FactTemplate, ...] = (
    multi("library_fine",
          "Our library fines members who bring books back late. Write the function that gives the fine.",
          "def library_fine(days_late):\n    if days_late <= {grace}:\n        return 0\n"
          "    return min((days_late - {grace}) * {rate}, {cap})",
          lambda v: calls("library_fine", 0, v["grace"], v["grace"] + 1, v["grace"] + 2, v["grace"] + 3, 1, 30, 200,
                          1000, 5000),
          (Detail("grace", lambda days: "Every day late is charged: there are no free days." if not days else
                  f"A book up to {days} days late pays no fine; the fine counts only the days after that.",
                  ("grace", "free", "waive", "fine start", "start charg", "before the fine", "first day")),
           (0, 1, 2, 3, 4, 5, 7, 10)),
          (Detail("rate", "Every charged day adds {value} to the fine.",
                  ("rate", "per day", "daily", "each day", "every day", "a day", "how much per")),
           (0.1, 0.2, 0.25, 0.3, 0.5, 0.75, 1, 1.5)),
          (Detail("cap", "The fine is never more than {value}.", CAP + ("limit",)),
           (5, 8, 10, 12, 15, 20, 25, 30)),
          outline=Outline("If days_late is at most {grace}, the result is 0. Otherwise the result is the smaller of "
                          "((days_late minus {grace}) times {rate}) and {cap}.",
                          {"grace": "the free days", "rate": "the daily rate", "cap": "the cap"}),
          validation={"grace": (6, 14), "rate": (0.4, 1.25), "cap": (6, 40)}),
    multi("ticket_price",
          "Our zoo charges some visitors less; a full ticket costs 20. Write the function that gives the price of a "
          "visitor's ticket.",
          "def ticket_price(age):\n    if age {op} {child_age}:\n        return {child_price}\n    return 20",
          lambda v: calls("ticket_price", *around(v["child_age"], 0, 1, 30, 65, 90, 18, 2)),
          (Detail("child_age", "The age limit for the reduced ticket is {value}.",
                  ("age limit", "what age", "which age", "how old", "young", "birthday", "child age", "age cutoff",
                   "age threshold", "age for")),
           (3, 4, 5, 6, 8, 10, 12, 14)),
          (Detail("op", side("A visitor exactly at the age limit", "still pays the reduced price",
                             "pays the full price"), INCLUSIVE + ("or younger",)),
           ("<", "<=", "<", "<=")),
          (Detail("child_price", lambda price: "The reduced ticket is free." if not price else
                  f"The reduced ticket costs {price}.",
                  ("reduced", "discount", "cheaper", "child price", "child ticket", "kid price", "kid ticket",
                   "for kid", "for child", "for children", "lower price")),
           (0, 4, 5, 8, 10, 12, 15, 16)),
          outline=Outline("If age is below {child_age} (whether exactly {child_age} counts too is {op}), the result is"
                          " {child_price}. Otherwise the result is 20.",
                          {"child_age": "the child age", "op": "the boundary rule", "child_price": "the child price"}),
          validation={"child_age": (7, 16), "child_price": (6, 9)}),
    multi("delivery_cost",
          "Our online grocery delivers to homes, and small orders pay for it. Write the function that gives what an "
          "order pays for delivery.",
          "def delivery_cost(order_total):\n    if order_total {op} {free_from}:\n        return 0\n    return {fee}",
          lambda v: calls("delivery_cost", *around(v["free_from"], 0, 5, 100, 250, 10, 15.5, 19.99)),
          (Detail("free_from", "The free-delivery threshold is an order total of {value}.",
                  ("free", "threshold", "minimum order", "order minimum", "how much to spend", "spend")),
           (20, 25, 30, 35, 40, 50, 60, 75)),
          (Detail("op", side("An order of exactly the free-delivery amount", "is delivered free",
                             "still pays for delivery"), INCLUSIVE),
           (">=", ">", ">=", ">")),
          (Detail("fee", "Delivery costs {value} when it is not free.",
                  ("fee", "charge", "price", "how much is delivery", "how much does delivery")),
           (1.99, 2.5, 2.99, 3.5, 3.99, 4.5, 4.99, 5.99)),
          outline=Outline("If order_total is above {free_from} (whether exactly {free_from} counts too is {op}), the "
                          "result is 0. Otherwise the result is {fee}.",
                          {"free_from": "the free-delivery threshold",
                           "op": "the boundary rule",
                           "fee": "the delivery fee"}),
          validation={"free_from": (45, 100), "fee": (6.5, 7.99)}),
    multi("sales_tax",
          "Our till works out the tax on every sale. Write the function that gives the tax on a price.",
          "def sales_tax(price):\n    return round(price * {percent} / 100, {digits})",
          lambda v: calls("sales_tax", 0, 1, 9.99, 10, 19.95, 33.33, 49.5, 100, 123.45, 999.99),
          (Detail("percent", "The tax is {value} percent of the price.", ("percent", "rate", "%", "how much tax")),
           (5, 6, 7, 8, 9, 10, 12, 15, 17, 19, 20, 21, 23, 25, 7.5, 8.25)),
          (Detail("digits", digits_fact("The tax"), ROUNDING), (0, 1, 2, 3)),
          outline=Outline("The result is (price times {percent} divided by 100) rounded to {digits} decimal places.",
                          {"percent": "the tax percent", "digits": "the precision"}),
          validation={"percent": (11, 13, 16)}),
    multi("course_grade",
          "Our college reports every exam as 'fail', 'pass' or 'merit'. Write the function that gives the label for "
          "a score.",
          "def course_grade(score):\n    if score >= {merit}:\n        return 'merit'\n"
          "    if score {op} {pass_mark}:\n        return 'pass'\n    return 'fail'",
          lambda v: calls("course_grade", v["pass_mark"] - 1, v["pass_mark"], v["pass_mark"] + 1, v["merit"] - 1,
                          v["merit"], v["merit"] + 1, 0, 100, 30, 69),
          (Detail("merit", "A merit needs a score of {value} or more.",
                  ("a merit", "for merit", "merit mark", "merit score", "merit threshold", "merit cutoff",
                   "merit from", "merit start")),
           (70, 72, 75, 78, 80, 85, 88, 90)),
          (Detail("pass_mark", "The pass mark is {value}.",
                  ("pass mark", "to pass", "a pass", "for pass", "pass threshold", "pass score",
                   "pass from", "pass cutoff")),
           (40, 45, 50, 55, 60, 62, 65, 68)),
          (Detail("op", side("A score exactly at the pass mark", "passes", "fails"), INCLUSIVE),
           (">=", ">", ">=", ">")),
          outline=Outline("If score is at least {merit}, the result is 'merit'. Otherwise, if score is above "
                          "{pass_mark} (whether exactly {pass_mark} counts too is {op}), the result is 'pass'. "
                          "Otherwise the result is 'fail'.",
                          {"merit": "the merit score", "pass_mark": "the pass mark", "op": "the boundary rule"}),
          validation={"merit": (82, 95), "pass_mark": (52, 58)}),
    multi("weekly_wage",
          "Our shop pays staff by the hour, and more for long weeks. Write the function that gives a week's wage.",
          "def weekly_wage(hours):\n    if hours <= {normal}:\n        return hours * {rate}\n"
          "    return {normal} * {rate} + (hours - {normal}) * {rate} * {factor}",
          lambda v: calls("weekly_wage", v["normal"] - 1, v["normal"], v["normal"] + 1, 0, 10, 20, v["normal"] + 5,
                          60, 80, 1),
          (Detail("normal", "A normal week is {value} hours; the hours past it are overtime.",
                  ("normal", "regular", "standard", "full week", "overtime start", "overtime begin",
                   "after how many", "how many hours before", "threshold")),
           (35, 36, 37, 38, 39, 40, 42, 45)),
          (Detail("rate", "The pay is {value} per hour.",
                  ("per hour", "hourly", "an hour", "each hour", "wage per", "pay rate", "base rate", "base pay",
                   "basic pay", "basic rate")),
           (10, 11, 12, 12.5, 14, 15, 16, 18)),
          (Detail("factor", "Overtime hours are paid {value} times the normal pay.",
                  ("overtime pay", "overtime paid", "overtime rate", "extra", "multiplier", "factor",
                   "time and a half", "double", "premium")),
           (1.25, 1.5, 2, 1.75)),
          outline=Outline("If hours is at most {normal}, the result is hours times {rate}. Otherwise the result is "
                          "{normal} times {rate} plus (hours minus {normal}) times {rate} times {factor}.",
                          {"normal": "the normal hours", "rate": "the hourly rate", "factor": "the overtime factor"}),
          validation={"normal": (41, 44), "rate": (13, 20), "factor": (1.2, 3)}),
    multi("invoice_number",
          "Our accounting tool prints a reference on every invoice, made from its running number. Write the "
          "function that makes the reference.",
          "def invoice_number(number):\n    return f'{prefix}{sep}{{number:0{width}d}}'",
          lambda v: calls("invoice_number", 1, 7, 42, 99, 100, 512, 1234, 99999, 5, 0),
          (Detail("prefix", "The reference starts with {quoted}.",
                  ("prefix", "start with", "begin with", "letters", "code start")),
           ("INV", "IN", "BILL", "AC", "FAC", "RE", "DOC", "NO")),
          (Detail("sep", "Between the letters and the number comes {quoted}.",
                  ("separator", "between", "dash", "hyphen", "slash", "delimiter", "join")),
           ("-", "/", "", "_", ".", "#", " ", ":")),
          (Detail("width", "The number is padded with zeros to {value} digits.",
                  ("digit", "pad", "zero", "width", "length", "leading")),
           (3, 4, 5, 6)),
          outline=Outline("The result is the text '<{prefix}><{sep}><number, zero-padded in {width} characters>'.",
                          {"prefix": "the prefix", "sep": "the separator", "width": "the width"}),
          validation={"prefix": ("INVC", "ACC"), "sep": ("--", "|"), "width": (2, 9)}),
    multi("greeting_line",
          "The first line of our newsletter greets the reader by name. Write the function that makes that line.",
          "def greeting_line(name):\n    return f'{word} {{name.{case}()}}{mark}'",
          lambda v: calls("greeting_line", "ann lee", "BOB", "cHEN wu", "dana", "Eve", "finn o'neil", "GUS x",
                          "hal", "ida may", "jo"),
          (Detail("word", "The line starts with {quoted}, then a space and the name.",
                  ("greeting word", "which word", "salutation", "start with", "begin with", "first word",
                   "opening word")),
           ("Hello", "Hi", "Dear", "Hey", "Welcome", "Greetings", "Good day", "Howdy")),
          (Detail("case", case_fact("The name"), CASE), ("title", "upper", "lower", "capitalize")),
          (Detail("mark", "After the name comes {quoted}.",
                  ("punctuation", "end with", "exclamation", "full stop", "period", "mark", "ending",
                   "last character", "after the name")),
           ("!", ".", ",", "!!", "", "?", ":", " :)")),
          outline=Outline("The result is the text '<{word}> <name written in {case}><{mark}>'.",
                          {"word": "the greeting word", "case": "the letter case", "mark": "the punctuation mark"}),
          validation={"word": ("Hiya", "Salut"), "mark": ("...", " ;)")}),
    multi("frost_warning",
          "Our garden app warns when a night may be too cold for plants. Write the function that gives the warning "
          "for a temperature in Celsius; it gives 'clear' when there is nothing to warn about.",
          "def frost_warning(temp_c):\n    if temp_c {op} {limit}:\n        return '{word}'\n    return 'clear'",
          lambda v: calls("frost_warning", *around(v["limit"], -10, -20, 10, 15, 25, 0.5, -0.5)),
          (Detail("limit", "The warning is about temperatures around {value} degrees and below.",
                  ("limit", "threshold", "degree", "how cold", "temperature limit", "cutoff", "below what",
                   "below which")),
           (-2, -1, 0, 1, 2, 3, 4, 5)),
          (Detail("op", side("A temperature exactly at the limit", "gets the warning", "is 'clear'"),
                  INCLUSIVE + ("or colder",)),
           ("<=", "<", "<=", "<")),
          (Detail("word", "The warning is the text {quoted}.",
                  ("warning text", "which word", "message", "label", "wording", "what text", "warning say",
                   "warning word", "string")),
           ("frost", "FROST", "cold", "frost warning", "danger", "protect plants", "freeze", "alert")),
          outline=Outline("If temp_c is below {limit} (whether exactly {limit} counts too is {op}), the result is the "
                          "text '<{word}>'. Otherwise the result is 'clear'.",
                          {"limit": "the temperature limit", "op": "the boundary rule", "word": "the warning word"}),
          validation={"limit": (6, -3), "word": ("chilly", "cover plants")}),
    multi("cab_fare",
          "Our taxi company needs its fare rule in code. Write the function that gives the fare for a ride's length "
          "in kilometres.",
          "def cab_fare(km):\n    return max({minimum}, {start} + km * {per_km})",
          lambda v: calls("cab_fare", 0, 1, 2, 3, 5, 10, 25, 50, 100, 7.5),
          (Detail("start", "Every ride starts at {value} before the distance is added.",
                  ("start fee", "starting fee", "start price", "start charge", "base", "flag fall", "flagfall",
                   "initial", "pickup", "pick up", "fixed")),
           (1, 1.5, 2, 2.5, 3, 3.5, 4, 5)),
          (Detail("per_km", "Each kilometre adds {value}.",
                  ("per km", "per kilometre", "per kilometer", "each km", "each kilometre", "each kilometer",
                   "a km", "a kilometre", "a kilometer", "every km", "every kilometre", "rate")),
           (0.8, 1, 1.2, 1.4, 1.5, 1.8, 2, 2.5)),
          (Detail("minimum", "No ride costs less than {value}.", MINIMUM + ("least",)),
           (6, 7, 8, 9, 10, 12, 14, 15)),
          outline=Outline("The result is the larger of {minimum} and ({start} plus km times {per_km}).",
                          {"minimum": "the minimum fare", "start": "the start fee", "per_km": "the rate per km"}),
          validation={"start": (4.5, 6), "per_km": (1.1, 3), "minimum": (11, 20)}),
    multi("water_bill",
          "Our water company bills households for the water they use. Write the function that gives a bill from the "
          "litres used.",
          "def water_bill(litres):\n    return round(max(0, litres - {free}) * {price} / 1000, {digits})",
          lambda v: calls("water_bill", 0, v["free"], v["free"] + 1, v["free"] + 250, v["free"] + 1234,
                          v["free"] + 777, 10000, 25000, 123456, v["free"] + 3333),
          (Detail("free", lambda litres: "No litre is free." if not litres else f"The first {litres} litres are free.",
                  ("free", "allowance", "no charge", "without charge")),
           (0, 500, 1000, 1500, 2000, 3000, 4000, 5000)),
          (Detail("price", "Each 1000 litres past the free ones cost {value}.",
                  ("price", "rate", "cost", "per litre", "per 1000", "per thousand", "per cubic")),
           (1.2, 1.5, 1.8, 2, 2.2, 2.5, 3, 3.5)),
          (Detail("digits", digits_fact("The bill"), ROUNDING), (0, 1, 2, 3)),
          outline=Outline("The result is ((the larger of 0 and (litres minus {free})) times {price} divided by 1000) "
                          "rounded to {digits}.",
                          {"free": "the free litres", "price": "the price", "digits": "the number of decimal places"}),
          validation={"free": (2500, 6000), "price": (1.7, 2.7)}),
    multi("passphrase_ok",
          "Our password manager checks every new passphrase. Write the check.",
          "def passphrase_ok(text):\n    if not {shortest} <= len(text) <= {longest}:\n        return False\n"
          "    return not {needs_digit} or any(ch.isdigit() for ch in text)",
          lambda v: calls("passphrase_ok", "x1" + "y" * (v["shortest"] - 2), "x1" + "y" * (v["shortest"] - 3),
                          "z" * v["shortest"], "9" + "q" * (v["longest"] - 1), "9" + "q" * v["longest"],
                          "w" * v["longest"], "", "abc123", "password", "correct horse battery staple 7"),
          (Detail("shortest", "A passphrase needs at least {value} characters.",
                  ("shortest", "minimum", "min", "too short", "at least how", "least")),
           (6, 8, 10, 12)),
          (Detail("longest", "A passphrase may have at most {value} characters.",
                  ("longest", "maximum", "max", "too long", "at most", "most")),
           (16, 20, 24, 30, 32, 40, 50, 64)),
          (Detail("needs_digit", {True: "A passphrase must contain a digit.",
                                  False: "A passphrase need not contain a digit."},
                  ("digit", "number", "numeral", "numeric")),
           (True, False, True, False)),
          outline=Outline("If the length of text is below {shortest} or above {longest}, the result is False. "
                          "Otherwise the result is True, except that when {needs_digit} requires a digit, the result "
                          "is whether text contains a digit.",
                          {"shortest": "the shortest length",
                           "longest": "the longest length",
                           "needs_digit": "the digit rule"}),
          validation={"shortest": (5, 9), "longest": (25, 48)}),
    multi("member_discount",
          "Our shop gives members money back on big purchases. Write the function that gives the price a member "
          "pays.",
          "def member_discount(total):\n    if total >= {min_total}:\n        total = total * (1 - {percent} / 100)\n"
          "    return round(total, {digits})",
          lambda v: calls("member_discount", v["min_total"] - 1, v["min_total"], v["min_total"] + 0.37, 0, 9.99,
                          19.99, 123.45, 333.33, 1000.1, 77.77),
          (Detail("min_total", "The discount applies to totals of {value} or more.",
                  ("minimum", "min", "threshold", "how much to spend", "spend", "qualify", "from what",
                   "from which", "eligible")),
           (20, 25, 30, 40, 50, 60, 75, 100)),
          (Detail("percent", "Members get {value} percent off.",
                  ("percent", "%", "how much off", "discount rate", "rate", "how big", "percentage")),
           (5, 8, 10, 12, 15, 20, 25, 30)),
          (Detail("digits", digits_fact("The price"), ROUNDING), (0, 1, 2, 3)),
          outline=Outline("If total is at least {min_total}, total becomes total times (1 minus {percent} divided by "
                          "100). The result is total rounded to {digits}.",
                          {"min_total": "the minimum total",
                           "percent": "the discount percent",
                           "digits": "the number of decimal places"}),
          validation={"min_total": (35, 80), "percent": (7, 18)}),
    multi("driver_band",
          "Our car insurer puts every driver in a band by age: 'young', 'standard' or 'senior'. Write the function "
          "that gives the band.",
          "def driver_band(age):\n    if age < {young}:\n        return 'young'\n    if age {op} {senior}:\n"
          "        return 'senior'\n    return 'standard'",
          lambda v: calls("driver_band", v["young"] - 1, v["young"], v["young"] + 1, v["senior"] - 1, v["senior"],
                          v["senior"] + 1, 40, 16, 90, 50),
          (Detail("young", "Drivers younger than {value} are in the 'young' band.",
                  ("young band", "young limit", "under what age", "count as young", "is young", "young until",
                   "young cutoff", "young threshold", "how young")),
           (18, 19, 20, 21, 22, 23, 24, 25)),
          (Detail("senior", "The 'senior' band starts around the age of {value}.",
                  ("senior band", "senior from", "senior age", "count as senior", "is senior", "senior threshold",
                   "senior cutoff", "how old", "senior start", "become senior", "retire")),
           (60, 62, 65, 67, 70, 72, 75, 80)),
          (Detail("op", side("A driver exactly at the senior age", "is 'senior'", "is still 'standard'"),
                  INCLUSIVE + ("or older",)),
           (">=", ">", ">=", ">")),
          outline=Outline("If age is below {young}, the result is 'young'. If age is above {senior} (whether exactly "
                          "{senior} counts too is {op}), the result is 'senior'. Otherwise the result is 'standard'.",
                          {"young": "the young limit", "senior": "the senior age", "op": "the boundary rule"}),
          validation={"young": (17, 26), "senior": (68, 78)}),
    multi("speed_text",
          "Our dashboard shows the car's speed as text. Write the function that turns a speed in km/h into that "
          "text.",
          "def speed_text(kmh):\n    return f'{{kmh:.{digits}f}}{sep}{unit}'",
          lambda v: calls("speed_text", 0, 5, 12.345, 50, 88.8, 100, 120.5, 0.06, 33.3333, 249.9951),
          (Detail("digits", "The speed shows {value} decimal places.", ROUNDING + ("places",)), (0, 1, 2, 3)),
          (Detail("sep", "Between the number and the unit comes {quoted}.",
                  ("space", "separator", "between", "gap", "dash", "hyphen")),
           (" ", "", "_", "-")),
          (Detail("unit", "The unit is written {quoted}.", ("unit", "suffix", "abbreviation", "label", "symbol")),
           ("km/h", "kph", "kmh", "KM/H", "km per hour", "kmph", "k/h", "KPH")),
          outline=Outline("The result is the text of kmh written with {digits}, followed by {sep} and then {unit}.",
                          {"digits": "the number of decimal places", "sep": "the separator", "unit": "the unit"}),
          validation={"unit": ("km/hr", "kms/h")}),
    multi("loyalty_points",
          "Our loyalty card turns purchases into points. Write the function that gives the points for an amount.",
          "def loyalty_points(amount):\n    return min(int(amount // {step}) * {per_step}, {cap})",
          lambda v: calls("loyalty_points", v["step"] - 1, v["step"], v["step"] + 1, 2 * v["step"],
                          3 * v["step"] - 1, 5 * v["step"], 8 * v["step"], 100000, 0, 1),
          (Detail("step", "Points are given for every full {value} spent.",
                  ("step", "how much money", "how much spend", "spent", "spend", "every how much")),
           (2, 4, 5, 8, 10, 20, 25, 50)),
          (Detail("per_step", "Each full step spent earns {value} points.",
                  ("how many point", "points per", "points each", "points for each", "award", "earn")),
           (1, 2, 3, 4, 5, 6, 8, 10)),
          (Detail("cap", "A purchase earns at most {value} points.", CAP + ("limit",)),
           (100, 150, 200, 250, 300, 400, 500, 1000)),
          outline=Outline("The result is the smaller of ((amount divided by {step}, rounded down to a whole number) "
                          "times {per_step}) and {cap}.",
                          {"step": "the step", "per_step": "the points earned", "cap": "the cap"}),
          validation={"step": (15, 40), "per_step": (7, 12), "cap": (600, 750)}),
    multi("hotel_total",
          "Our hotel's booking page shows what a stay costs. Write the function that gives the total for a number of "
          "nights.",
          "def hotel_total(nights):\n    total = nights * {nightly}\n    if nights >= {long_stay}:\n"
          "        total = total * (1 - {percent} / 100)\n    return round(total, 2)",
          lambda v: calls("hotel_total", 0, 1, 2, v["long_stay"] - 1, v["long_stay"], v["long_stay"] + 1, 15, 20,
                          30, 45),
          (Detail("nightly", "A night costs {value}.",
                  ("nightly", "per night", "a night", "each night", "night rate", "room rate", "price per",
                   "room price")),
           (60, 75, 80, 90, 95, 110, 120, 150)),
          (Detail("long_stay", "Stays of {value} nights or more get the long-stay discount.",
                  ("long stay", "how many nights", "minimum stay", "from how many", "after how many",
                   "nights for the")),
           (3, 4, 5, 6, 7, 8, 10, 14)),
          (Detail("percent", "The long-stay discount is {value} percent.",
                  ("percent", "%", "discount", "how much off", "reduction")),
           (5, 8, 10, 12, 15, 20, 25, 30)),
          outline=Outline("Let total be nights times {nightly}. If nights is at least {long_stay}, total becomes total"
                          " times (1 minus {percent} divided by 100). The result is total rounded to 2 decimal places.",
                          {"nightly": "the nightly price",
                           "long_stay": "the long stay length",
                           "percent": "the discount percent"}),
          validation={"nightly": (85, 130), "long_stay": (9, 12), "percent": (18, 22)}),
    multi("phone_display",
          "Our contact page shows phone numbers in a readable way. Write the function that formats a number given as "
          "a string of digits.",
          "def phone_display(number):\n"
          "    return '{prefix}' + '{sep}'.join(number[i:i + {group}] for i in range(0, len(number), {group}))",
          lambda v: calls("phone_display", "0123456789", "5551234", "12345678", "0044207946", "99", "123", "7",
                          "987654321012", "24681357", "1000001"),
          (Detail("prefix", "The shown number starts with {quoted}.",
                  ("prefix", "start with", "begin with", "before the number", "in front")),
           ("", "+", "tel: ", "Tel. ", "☎ ", "Phone: ", "(0)", "+00 ")),
          (Detail("sep", "Between the groups comes {quoted}.",
                  ("separator", "between", "delimiter", "space", "dash", "dot")),
           (" ", "-", ".", "/", " - ", "_", "·", ":")),
          (Detail("group", "The digits are shown in groups of {value}, from the left.",
                  ("group", "chunk", "block", "how many digit", "digits per", "split")),
           (2, 3, 4, 5)),
          outline=Outline("The result is {prefix} followed by number cut from the left into groups of {group} digits "
                          "(the last group may be shorter), joined by {sep}.",
                          {"prefix": "the prefix", "sep": "the separator", "group": "the group size"}),
          validation={"prefix": ("call ", "TEL "), "sep": ("|", "  "), "group": (6,)}),
    multi("gym_fee",
          "Our gym charges new members for their membership. Write the function that gives what a member pays in "
          "total for a number of months.",
          "def gym_fee(months):\n    return {joining} + max(0, months - {free_months}) * {monthly}",
          lambda v: calls("gym_fee", 0, 1, 2, 3, 4, 5, 6, 12, 24, 36),
          (Detail("joining", lambda fee: "Joining is free." if not fee else f"Joining costs {fee} once.",
                  ("joining", "join", "sign up", "signup", "enrol", "registration", "one-off", "one off",
                   "admission", "entry fee", "setup")),
           (0, 10, 15, 20, 25, 30, 40, 50)),
          (Detail("monthly", "Each month costs {value}.",
                  ("monthly", "per month", "a month", "each month", "every month", "membership price")),
           (19, 25, 29, 30, 35, 39, 45, 49)),
          (Detail("free_months", lambda months: {0: "No month is free.", 1: "The first month is free."}.get(
                      months, f"The first {months} months are free."), ("free", "trial", "no charge", "waived")),
           (0, 1, 2, 3)),
          outline=Outline("The result is {joining} plus ((the larger of 0 and (months minus {free_months})) times "
                          "{monthly}).",
                          {"joining": "the joining fee",
                           "monthly": "the monthly price",
                           "free_months": "the free months"}),
          validation={"joining": (35, 60), "monthly": (22, 55), "free_months": (4,)}),
    multi("split_bill",
          "Friends at our café split the bill evenly, with something extra for the staff. Write the function that "
          "gives each person's share.",
          "def split_bill(bill, people):\n    return round(bill * (1 + {tip} / 100) / people, {digits})",
          lambda v: calls("split_bill", (100, 3), (57.5, 2), (12.34, 1), (250, 4), (99.99, 7), (10, 3), (1000, 6),
                          (45.6, 5), (80, 2), (33.3, 1)),
          (Detail("tip", lambda tip: f"The tip is {tip} percent of the bill." if tip else "There is no tip.",
                  ("tip", "gratuity", "percent", "%", "service")),
           (0, 5, 10, 12, 15, 18, 20, 25)),
          (Detail("digits", digits_fact("Each share"), ROUNDING), (0, 1, 2, 3)),
          outline=Outline("The result is (bill times (1 plus {tip} divided by 100) divided by people) rounded to "
                          "{digits}.",
                          {"tip": "the tip percent", "digits": "the number of decimal places"}),
          validation={"tip": (8, 22)}),
)

# The test split's own unseen templates: the same kinds of details, and no name, function or request shared with any
# other template of either family.
UNSEEN_TEMPLATES: tuple[FactTemplate, ...] = (
    multi("checkout_fee",
          "Our hotel charges guests who leave their room late. Write the function that gives the charge for the hour "
          "(0 to 24) at which a guest leaves.",
          "def checkout_fee(hour):\n    if hour <= {free_until}:\n        return 0\n"
          "    return min((hour - {free_until}) * {per_hour}, {cap})",
          lambda v: calls("checkout_fee", 8, v["free_until"], v["free_until"] + 1, v["free_until"] + 2,
                          v["free_until"] + 3, 23, 24, v["free_until"] - 1, 0, 16.5),
          (Detail("free_until", "Leaving up to hour {value} is free.",
                  ("free", "until what", "until which", "no charge", "standard checkout", "checkout time",
                   "latest")),
           (10, 11, 12, 13)),
          (Detail("per_hour", "Each hour later costs {value}.",
                  ("per hour", "an hour", "each hour", "hourly", "rate", "every hour")),
           (10, 15, 20, 25, 30)),
          (Detail("cap", "The charge is never more than {value}.", CAP + ("limit",)), (40, 50, 60, 80, 100)),
          outline=Outline("If hour is at most {free_until}, the result is 0. Otherwise the result is the smaller of "
                          "((hour minus {free_until}) times {per_hour}) and {cap}.",
                          {"free_until": "the last free hour", "per_hour": "the hourly rate", "cap": "the cap"})),
    multi("quiz_percent",
          "Our quiz app shows a learner's score as a percentage, with a flag saying whether it is good enough. Write "
          "the function that gives both for the points scored.",
          "def quiz_percent(points):\n    percent = round(points / {out_of} * 100, {digits})\n"
          "    return percent, percent >= {pass_percent}",
          lambda v: calls("quiz_percent", 0, v["out_of"], v["out_of"] * v["pass_percent"] / 100,
                          v["out_of"] * v["pass_percent"] / 100 - 0.5, v["out_of"] * v["pass_percent"] / 100 + 0.5,
                          1, 7, 11, v["out_of"] - 1, 2),
          (Detail("out_of", "The quiz has {value} points in all.",
                  ("out of", "maximum points", "max points", "total points", "full marks", "how many points",
                   "possible")),
           (12, 15, 18, 21, 24, 27, 30, 33)),
          (Detail("digits", digits_fact("The percentage"), ROUNDING), (0, 1, 2, 3)),
          (Detail("pass_percent", "A percentage of {value} or more passes.", ("pass", "passing", "threshold")),
           (40, 50, 60, 70, 80)),
          outline=Outline("percent is (points divided by {out_of} times 100) rounded to {digits}. The result is two "
                          "values: percent, and whether percent is at least {pass_percent}.",
                          {"out_of": "the total points",
                           "digits": "the number of decimal places",
                           "pass_percent": "the pass mark"})),
    multi("product_sku",
          "Our warehouse labels products with a stock code built from the supplier's code. Write the function that "
          "builds it.",
          "def product_sku(code):\n    return '{prefix}' + '{sep}' + code.{case}()",
          lambda v: calls("product_sku", "ab12", "Shoe-red", "CUP", "mug blue", "x", "Lamp", "desk 7", "tEA",
                          "pen", "Box Big"),
          (Detail("prefix", "The stock code starts with {quoted}.",
                  ("prefix", "start with", "begin with", "in front", "letters before")),
           ("SKU", "P", "ITEM", "PRD", "ART", "X")),
          (Detail("sep", "After the prefix comes {quoted}.",
                  ("separator", "between", "dash", "slash", "delimiter", "join")),
           ("-", "/", "", "_", ".", ":")),
          (Detail("case", case_fact("The supplier's code"), CASE), ("upper", "lower", "title", "swapcase")),
          outline=Outline("The result is {prefix}, followed by {sep}, followed by code written in {case}.",
                          {"prefix": "the prefix", "sep": "the separator", "case": "the letter case"})),
    multi("gas_bill",
          "Our energy company sends a gas bill every month. Write the function that gives the bill for the units a "
          "home used.",
          "def gas_bill(units):\n    return round({standing} + units * {price}, {digits})",
          lambda v: calls("gas_bill", 0, 1, 10, 33, 100, 123, 250, 777, 1000, 12.34),
          (Detail("standing", "Every bill has a standing charge of {value}.",
                  ("standing", "fixed", "base", "flat")),
           (5, 8, 10, 12.5, 15, 20)),
          (Detail("price", "Each unit costs {value}.",
                  ("price per", "per unit", "unit price", "rate", "cost per", "each unit", "a unit")),
           (0.07, 0.085, 0.09, 0.1, 0.12, 0.145)),
          (Detail("digits", digits_fact("The bill"), ROUNDING), (0, 1, 2)),
          outline=Outline("The result is ({standing} plus units times {price}) rounded to {digits}.",
                          {"standing": "the standing charge",
                           "price": "the unit price",
                           "digits": "the number of decimal places"})),
    multi("bike_rental",
          "Our bike shop rents bikes out. Write the function that gives the rental price for a number of hours.",
          "def bike_rental(hours):\n    return min({first} + max(0, hours - 1) * {extra}, {day_max})",
          lambda v: calls("bike_rental", 1, 2, 3, 0.5, 4, 8, 24, 48, 100, 1.5),
          (Detail("first", "The first hour costs {value}.", ("first hour", "start", "initial", "base")),
           (5, 6, 8, 10, 12)),
          (Detail("extra", "Every hour after the first costs {value}.",
                  ("extra hour", "each additional", "additional hour", "further hour", "after the first",
                   "each extra", "per extra", "every hour after")),
           (2, 3, 4, 5, 6)),
          (Detail("day_max", "A rental never costs more than {value}.",
                  CAP + ("daily", "a day", "per day", "whole day", "day price")),
           (25, 30, 35, 40, 50)),
          outline=Outline("The result is the smaller of ({first} plus (the larger of 0 and (hours minus 1)) times "
                          "{extra}) and {day_max}.",
                          {"first": "the first hour price",
                           "extra": "the extra hour price",
                           "day_max": "the daily cap"})),
    multi("queue_status",
          "Our clinic's screen says how long the queue is: 'short', 'busy' or 'full'. Write the function that gives "
          "the status for the number of people waiting.",
          "def queue_status(waiting):\n    if waiting {op} {full_from}:\n        return 'full'\n"
          "    if waiting >= {busy_from}:\n        return 'busy'\n    return 'short'",
          lambda v: calls("queue_status", v["busy_from"] - 1, v["busy_from"], v["busy_from"] + 1,
                          v["full_from"] - 1, v["full_from"], v["full_from"] + 1, 0, 100, 12, 2),
          (Detail("busy_from", "The queue is 'busy' from {value} people waiting.",
                  ("busy from", "count as busy", "is busy", "busy threshold", "busy start", "for busy",
                   "becomes busy", "become busy")),
           (3, 5, 8, 10)),
          (Detail("full_from", "The queue is 'full' at around {value} people waiting.",
                  ("full from", "count as full", "is full", "full threshold", "for full", "becomes full",
                   "become full", "full start")),
           (15, 20, 25, 30)),
          (Detail("op", side("Exactly the 'full' number of people", "is 'full'", "is still 'busy'"), INCLUSIVE),
           (">=", ">", ">=", ">")),
          outline=Outline("If waiting is above {full_from} (whether exactly {full_from} counts too is {op}), the "
                          "result is 'full'. Otherwise, if waiting is at least {busy_from}, the result is 'busy'; "
                          "otherwise the result is 'short'.",
                          {"busy_from": "the busy threshold",
                           "full_from": "the full threshold",
                           "op": "the boundary rule"})),
)

# The validation split's own unseen templates (none shared with any other split, the warm-start pool or the
# procedural family), so that settings chosen on them carry no knowledge of a test template.
VALIDATION_UNSEEN_TEMPLATES: tuple[FactTemplate, ...] = (
    multi("boarding_group",
          "Our airline calls passengers to board in three groups by the row of their seat, from the back. Write the "
          "function that gives the group number for a row.",
          "def boarding_group(seat_row):\n    if seat_row {op} {back_from}:\n        return 1\n"
          "    if seat_row >= {middle_from}:\n        return 2\n    return 3",
          lambda v: calls("boarding_group", v["middle_from"] - 1, v["middle_from"], v["middle_from"] + 1,
                          v["back_from"] - 1, v["back_from"], v["back_from"] + 1, 1, 40, 17, 3),
          (Detail("back_from", "Group 1 is the rows from about row {value} back.",
                  ("group 1", "first group", "group one", "boards first", "rear", "back row", "back group")),
           (20, 22, 25, 28, 30)),
          (Detail("middle_from", "Group 2 starts at row {value}.",
                  ("group 2", "second group", "group two", "middle")),
           (8, 10, 12, 14, 15)),
          (Detail("op", side("The row exactly at group 1's start", "is in group 1", "is in group 2"), INCLUSIVE),
           (">=", ">", ">=", ">")),
          outline=Outline("If seat_row is above {back_from} (whether exactly {back_from} counts too is {op}), the "
                          "result is 1. Otherwise, if seat_row is at least {middle_from}, the result is 2; otherwise "
                          "the result is 3.",
                          {"back_from": "the first row of group 1",
                           "middle_from": "the first row of group 2",
                           "op": "the boundary rule"})),
    multi("city_tax",
          "Our booking site must add the city's tourist tax to a stay. Write the function that gives the tax for a "
          "stay, given the nights and the room price.",
          "def city_tax(nights, price):\n    return round(nights * ({per_night} + price * {percent} / 100), {digits})",
          lambda v: calls("city_tax", (1, 99.99), (3, 123.45), (2, 80), (7, 59.9), (1, 10), (5, 333.33), (0, 100),
                          (14, 45.5), (2, 1000), (4, 77.7)),
          (Detail("per_night", "The tax has a fixed part of {value} per night.",
                  ("per night", "a night", "each night", "nightly", "fixed", "flat")),
           (0.5, 1, 1.5, 2, 2.5, 3)),
          (Detail("percent", "The tax adds {value} percent of the room price for each night.",
                  ("percent", "%", "share of the price", "proportion")),
           (2, 3, 4.5, 5, 7.5, 10)),
          (Detail("digits", digits_fact("The tax"), ROUNDING), (0, 1, 2)),
          outline=Outline("The result is (nights times ({per_night} plus price times {percent} divided by 100)) "
                          "rounded to {digits}.",
                          {"per_night": "the fixed part per night",
                           "percent": "the percent",
                           "digits": "the number of decimal places"})),
    multi("name_badge",
          "Our conference prints each guest's name on a badge. Write the function that makes the badge text.",
          "def name_badge(first, last):\n    parts = [first, last] if {first_name_first} else [last, first]\n"
          "    return '{sep}'.join(parts).{case}()",
          lambda v: calls("name_badge", ("ann", "lee"), ("Bob", "Ray"), ("chen", "WU"), ("Dana", "o'neil"),
                          ("eve", "Ng"), ("Finn", "Olsen"), ("gus", "x"), ("HAL", "jordan"), ("Ida", "May"),
                          ("jo", "Bo")),
          (Detail("first_name_first", {True: "The first name comes first.", False: "The last name comes first."},
                  ("order", "which first", "which name first", "first name first", "last name first",
                   "surname first", "comes first", "before the")),
           (True, False, True, False)),
          (Detail("sep", "Between the names comes {quoted}.",
                  ("separator", "between", "comma", "space", "dash")),
           (" ", ", ", "-", "_", ".")),
          (Detail("case", case_fact("The badge text"), CASE), ("upper", "lower", "title")),
          outline=Outline("If {first_name_first} holds, the parts are first then last; otherwise they are last then "
                          "first. The result is the parts joined by {sep}, written in {case}.",
                          {"first_name_first": "the first-name-first rule",
                           "sep": "the separator",
                           "case": "the letter case"})),
    multi("data_overage",
          "Our phone company charges extra when a customer uses a lot of mobile data. Write the function that gives "
          "the extra charge for the megabytes used in a month.",
          "def data_overage(mb):\n    extra = max(0, mb - {allowance})\n"
          "    return min(-(-extra // 100) * {price}, {cap})",
          lambda v: calls("data_overage", 0, v["allowance"], v["allowance"] + 1, v["allowance"] + 100,
                          v["allowance"] + 101, v["allowance"] + 250, v["allowance"] + 10000, v["allowance"] - 1,
                          100000, v["allowance"] + 999),
          (Detail("allowance", "The first {value} MB of the month are included.",
                  ("allowance", "included", "free", "how much data")),
           (500, 1000, 2000, 3000, 5000)),
          (Detail("price", "Every started 100 MB past the included data costs {value}.",
                  ("price", "per 100", "each block", "per block", "rate", "cost per")),
           (1, 2, 2.5, 3, 5)),
          (Detail("cap", "The extra charge is never more than {value} a month.", CAP + ("limit",)),
           (20, 25, 30, 40, 50)),
          outline=Outline("extra is the larger of 0 and (mb minus {allowance}). The result is the smaller of ((extra "
                          "divided by 100, rounded up to a whole number) times {price}) and {cap}.",
                          {"allowance": "the allowance", "price": "the price per 100 MB", "cap": "the cap"})),
    multi("bakery_total",
          "Our bakery sells loaves and rewards regular customers. Write the function that gives the total for a "
          "number of loaves.",
          "def bakery_total(loaves):\n    paid = loaves - loaves // {nth}\n    return round(paid * {price} + {bag}, 2)",
          lambda v: calls("bakery_total", 0, 1, v["nth"] - 1, v["nth"], v["nth"] + 1, 2 * v["nth"], 20, 3, 13, 50),
          (Detail("nth", "Every {value}th loaf is free.",
                  ("free", "every", "nth", "how many loaves for", "loyalty")),
           (4, 5, 6, 8, 10)),
          (Detail("price", "A loaf costs {value}.",
                  ("price", "cost of a loaf", "per loaf", "a loaf", "each loaf", "how much is a")),
           (2.2, 2.5, 3, 3.2, 3.5, 4)),
          (Detail("bag", "Every order pays {value} for the bag.", ("bag", "packaging", "carrier", "sack")),
           (0.1, 0.2, 0.25, 0.5)),
          outline=Outline("paid is loaves minus (loaves divided by {nth}, rounded down). The result is (paid times "
                          "{price} plus {bag}) rounded to 2 decimal places.",
                          {"nth": "the free loaf number", "price": "the loaf price", "bag": "the bag charge"})),
    multi("noise_alert",
          "Our building's sensor raises an alert when it is noisy, and reports 'quiet' otherwise. Write the function "
          "that gives the sensor's report for a sound level in decibels.",
          "def noise_alert(level):\n    if level {op} {limit}:\n        return '{word}'\n    return 'quiet'",
          lambda v: calls("noise_alert", *around(v["limit"], 0, 30, 50, 100, 120, 54.5, 90)),
          (Detail("limit", "The alert is about sound levels around {value} and up.",
                  ("limit", "threshold", "how loud", "level limit", "cutoff", "above what", "above which")),
           (55, 60, 65, 70, 75, 80, 85)),
          (Detail("op", side("A level exactly at the limit", "raises the alert", "is 'quiet'"), INCLUSIVE),
           (">=", ">", ">=", ">")),
          (Detail("word", "The alert is the text {quoted}.",
                  ("which word", "what text", "message", "label", "wording", "alert text", "alert say",
                   "string")),
           ("loud", "too loud", "LOUD", "noise", "warning")),
          outline=Outline("If level is above {limit} (whether exactly {limit} counts too is {op}), the result is "
                          "{word}. Otherwise the result is 'quiet'.",
                          {"limit": "the limit", "op": "the boundary rule", "word": "the alert text"})),
)

# The warm-start pool: expert dialogues (sweet_trl.warm_start) come from these templates only (the expert asks for the
# outline, then for every detail by its name there); no name, function or request is shared with
# a split's template of either family, so imitating them teaches the dialogue's form and no held-out task.
WARM_START_TEMPLATES: tuple[FactTemplate, ...] = (
    multi("parking_charge",
          "Our car park charges drivers for the time they stay. Write the function that gives the charge for a "
          "number of minutes.",
          "def parking_charge(minutes):\n    if minutes <= {free_minutes}:\n        return 0\n"
          "    return min(-(-minutes // 60) * {per_hour}, {day_max})",
          lambda v: calls("parking_charge", 0, v["free_minutes"], v["free_minutes"] + 1, 60, 61, 119, 121, 185,
                          1440, 600),
          (Detail("free_minutes", "Stays up to {value} minutes are free.", ("free", "no charge", "grace")),
           (10, 15, 20, 30)),
          (Detail("per_hour", "Each started hour costs {value}.",
                  ("per hour", "each hour", "an hour", "hourly", "started hour", "rate")),
           (1, 1.5, 2, 2.5, 3)),
          (Detail("day_max", "A stay never costs more than {value}.", CAP + ("limit", "daily")),
           (10, 12, 15, 20)),
          outline=Outline("If minutes is at most {free_minutes}, the result is 0. Otherwise the result is the smaller "
                          "of ((minutes divided by 60, rounded up) times {per_hour}) and {day_max}.",
                          {"free_minutes": "the free minutes",
                           "per_hour": "the hourly rate",
                           "day_max": "the daily maximum"})),
    multi("rent_late_fee",
          "Our letting agency charges tenants who pay the rent late. Write the function that gives the charge for a "
          "number of days late.",
          "def rent_late_fee(days):\n    if days <= {grace}:\n        return 0\n"
          "    return {flat} + (days - {grace}) * {per_day}",
          lambda v: calls("rent_late_fee", 0, v["grace"], v["grace"] + 1, v["grace"] + 2, 10, 20, 30, 1, 60, 45),
          (Detail("grace", lambda days: "There is no grace period: the first day late is charged." if not days else
                  f"Paying up to {days} days late costs nothing.", ("grace", "free", "waive")),
           (0, 1, 2, 3, 5)),
          (Detail("flat", "A late payment costs a flat {value} first.", ("flat", "fixed", "one-off", "one off")),
           (10, 15, 20, 25, 30)),
          (Detail("per_day", "Each day past the grace period adds {value}.",
                  ("per day", "each day", "a day", "daily", "every day")),
           (1, 2, 2.5, 5)),
          outline=Outline("If days is at most {grace}, the result is 0. Otherwise the result is {flat} plus ((days "
                          "minus {grace}) times {per_day}).",
                          {"grace": "the grace period", "flat": "the flat fee", "per_day": "the daily charge"})),
    multi("quiz_grade",
          "Our school's online quizzes give each result a word: 'retry', 'good' or 'excellent'. Write the function "
          "that gives the word for a number of correct answers.",
          "def quiz_grade(correct):\n    if correct >= {excellent}:\n        return 'excellent'\n"
          "    if correct {op} {good}:\n        return 'good'\n    return 'retry'",
          lambda v: calls("quiz_grade", v["good"] - 1, v["good"], v["good"] + 1, v["excellent"] - 1, v["excellent"],
                          v["excellent"] + 1, 0, 30, 1, 25),
          (Detail("good", "The 'good' mark is {value} correct answers.",
                  ("for good", "count as good", "good from", "good mark", "is good")),
           (5, 6, 7, 8)),
          (Detail("excellent", "'excellent' needs {value} or more correct answers.",
                  ("for excellent", "count as excellent", "excellent from", "excellent mark", "is excellent")),
           (12, 14, 15, 18, 20)),
          (Detail("op", side("Exactly the 'good' mark", "is 'good'", "is 'retry'"), INCLUSIVE),
           (">=", ">", ">=", ">")),
          outline=Outline("If correct is at least {excellent}, the result is 'excellent'. Otherwise, if correct is "
                          "above {good} (whether exactly {good} counts too is {op}), the result is 'good'; otherwise "
                          "the result is 'retry'.",
                          {"excellent": "the excellent mark", "good": "the good mark", "op": "the boundary rule"})),
    multi("shoe_label",
          "Our shoe shop prints the size on every box. Write the function that makes the size label.",
          "def shoe_label(size):\n    return f'{system}{sep}{{size:.{digits}f}}'",
          lambda v: calls("shoe_label", 38, 42.5, 7, 9.5, 10, 44, 36.25, 11, 40.75, 5),
          (Detail("system", "The label starts with {quoted}.",
                  ("system", "prefix", "start with", "begin with", "country", "region")),
           ("EU", "UK", "US", "Size", "EUR")),
          (Detail("sep", "Between that and the size comes {quoted}.",
                  ("separator", "between", "space", "dash", "colon")),
           (" ", ": ", "-", "")),
          (Detail("digits", "The size shows {value} decimal places.", ROUNDING + ("places",)),
           (0, 1, 2)),
          outline=Outline("The result is the text '<{system}><{sep}><size>', where size is shown with exactly "
                          "{digits}.",
                          {"system": "the size system",
                           "sep": "the separator",
                           "digits": "the number of decimal places"})),
    multi("bus_fare",
          "Our city's buses charge young riders less; an adult fare is 3. Write the function that gives the fare for "
          "a rider's age.",
          "def bus_fare(age):\n    if age {op} {child_age}:\n        return {child_fare}\n    return 3",
          lambda v: calls("bus_fare", *around(v["child_age"], 0, 2, 30, 70, 90, 18, 4)),
          (Detail("child_age", "The age limit for the child fare is {value}.",
                  ("age limit", "what age", "which age", "how old", "age cutoff", "child age")),
           (5, 6, 10, 12, 14, 16)),
          (Detail("op", side("A rider exactly at the age limit", "pays the child fare", "pays the adult fare"),
                  INCLUSIVE + ("or younger",)),
           ("<", "<=", "<", "<=")),
          (Detail("child_fare", lambda fare: "Children ride free." if not fare else f"The child fare is {fare}.",
                  ("child fare", "child price", "reduced", "cheaper", "kid fare", "for child", "for children")),
           (0, 1, 1.5, 2)),
          outline=Outline("If age is below {child_age} (whether exactly {child_age} counts too is {op}), the result is"
                          " {child_fare}. Otherwise the result is 3.",
                          {"child_age": "the age limit", "op": "the boundary rule", "child_fare": "the child fare"})),
    multi("print_cost",
          "Our print shop prices printing jobs. Write the function that gives the price of a job by its pages.",
          "def print_cost(pages):\n    return round({setup} + pages * {per_page}, {digits})",
          lambda v: calls("print_cost", 0, 1, 3, 10, 33, 77, 100, 250, 1001, 7),
          (Detail("setup", "Every job has a setup charge of {value}.", ("setup", "set up", "fixed", "base")),
           (0.5, 1, 2, 2.5, 5)),
          (Detail("per_page", "Each page costs {value}.", ("per page", "each page", "a page", "page price")),
           (0.03, 0.05, 0.08, 0.09, 0.125, 0.15)),
          (Detail("digits", digits_fact("The price"), ROUNDING),
           (0, 1, 2)),
          outline=Outline("The result is ({setup} plus (pages times {per_page})) rounded to {digits}.",
                          {"setup": "the setup charge",
                           "per_page": "the price per page",
                           "digits": "the number of decimal places"})),
    multi("room_code",
          "Our office building names every room from its floor and number. Write the function that makes a room's "
          "code.",
          "def room_code(floor, room):\n    return f'{prefix}{{floor}}{sep}{{room:0{width}d}}'",
          lambda v: calls("room_code", (1, 1), (2, 15), (0, 7), (10, 120), (3, 3), (5, 42), (12, 9), (4, 100),
                          (7, 1234), (9, 60)),
          (Detail("prefix", "The code starts with {quoted}.", ("prefix", "start with", "begin with", "letter")),
           ("R", "RM", "", "Room ", "B")),
          (Detail("sep", "Between the floor and the room number comes {quoted}.",
                  ("separator", "between", "dot", "dash")),
           (".", "-", "/", "")),
          (Detail("width", "The room number is padded with zeros to {value} digits.",
                  ("pad", "zero", "width", "how many digit", "leading")),
           (2, 3, 4)),
          outline=Outline("The result is the text '<{prefix}><floor><{sep}><room>', where room is padded with zeros to"
                          " {width}.",
                          {"prefix": "the prefix", "sep": "the separator", "width": "the padding width"})),
    multi("activity_message",
          "Our fitness watch congratulates its wearer on an active day, and says 'keep going' otherwise. Write the "
          "function that gives the message for a day's steps.",
          "def activity_message(steps):\n    if steps {op} {goal}:\n        return '{message}'\n"
          "    return 'keep going'",
          lambda v: calls("activity_message", *around(v["goal"], 0, 100, 3000, 20000, 50000, 12345, 999)),
          (Detail("goal", "The daily goal is {value} steps.", ("goal", "target", "how many steps", "threshold")),
           (5000, 6000, 7500, 8000, 10000)),
          (Detail("op", side("A day exactly at the goal", "gets the congratulation", "gets 'keep going'"),
                  INCLUSIVE),
           (">=", ">", ">=", ">")),
          (Detail("message", "The congratulation is the text {quoted}.",
                  ("congratulation", "which text", "what text", "wording", "what does it say", "message text")),
           ("well done", "Goal reached!", "great job", "GOAL")),
          outline=Outline("If steps is above {goal} (whether exactly {goal} counts too is {op}), the result is "
                          "{message}. Otherwise the result is 'keep going'.",
                          {"goal": "the step goal", "op": "the boundary rule", "message": "the congratulation text"})),
    multi("sales_commission",
          "Our sales staff earn a commission on their monthly sales. Write the function that gives a seller's "
          "commission.",
          "def sales_commission(sales):\n    if sales < {from_sales}:\n        return 0\n"
          "    return min(sales * {rate}, {cap})",
          lambda v: calls("sales_commission", 0, v["from_sales"] - 1, v["from_sales"], v["from_sales"] + 1, 10000,
                          25000, 1000000, 500, 3333, 7777),
          (Detail("from_sales", "Commission starts at {value} of sales.",
                  ("from what", "from which", "threshold", "minimum sales", "start earning", "qualify")),
           (1000, 2000, 2500, 5000)),
          (Detail("rate", "The commission is {value} of the sales.", ("rate", "percent", "%", "share")),
           (0.02, 0.03, 0.05, 0.08, 0.1)),
          (Detail("cap", "The commission is never more than {value}.", CAP + ("limit",)),
           (1500, 2000, 3000, 5000)),
          outline=Outline("If sales is below {from_sales}, the result is 0. Otherwise the result is the smaller of "
                          "(sales times {rate}) and {cap}.",
                          {"from_sales": "the sales threshold", "rate": "the commission rate", "cap": "the cap"})),
    multi("paint_litres",
          "Our paint shop tells customers how much paint a wall needs. Write the function that gives the litres for "
          "an area in square metres.",
          "def paint_litres(area):\n    return max({minimum}, round(area / {coverage}, {digits}))",
          lambda v: calls("paint_litres", 0, 1, 7, 13.5, 25, 40, 55.5, 100, 250, 333),
          (Detail("coverage", "One litre covers {value} square metres.",
                  ("coverage", "cover", "per litre", "a litre", "each litre", "square metres per")),
           (6, 8, 10, 12, 14)),
          (Detail("digits", digits_fact("The litres"), ROUNDING),
           (0, 1, 2)),
          (Detail("minimum", "The answer is never below {value} litres.", MINIMUM + ("least",)),
           (0.5, 1, 2, 2.5)),
          outline=Outline("The result is the larger of {minimum} and ((area divided by {coverage}) rounded to "
                          "{digits}).",
                          {"coverage": "the coverage per litre",
                           "digits": "the number of decimal places",
                           "minimum": "the minimum amount"})),
    multi("temperature_text",
          "Our weather widget shows the temperature as text. Write the function that makes the text for a "
          "temperature in Celsius.",
          "def temperature_text(celsius):\n    return f'{{celsius:.{digits}f}}{sep}{unit}'",
          lambda v: calls("temperature_text", 0, -3.5, 21.25, 37.777, 100, -40, 12.3456, 5, 0.05, 19.95),
          (Detail("digits", "The temperature shows {value} decimal places.", ROUNDING + ("places",)),
           (0, 1, 2)),
          (Detail("sep", "Between the number and the unit comes {quoted}.",
                  ("space", "separator", "between", "gap")),
           ("", " ", "\u00a0")),
          (Detail("unit", "The unit is written {quoted}.", ("unit", "symbol", "suffix", "abbreviation")),
           ("°C", "C", "degrees", "deg C", "ºC")),
          outline=Outline("The result is the text '<celsius><{sep}><{unit}>', where celsius is shown with exactly "
                          "{digits}.",
                          {"digits": "the number of decimal places", "sep": "the separator", "unit": "the unit"})),
    multi("fuel_surcharge",
          "Our courier adds a fuel surcharge to long deliveries. Write the function that gives the surcharge for a "
          "distance in kilometres.",
          "def fuel_surcharge(distance_km):\n    return round(max(0, distance_km - {from_km}) * {per_km}, {digits})",
          lambda v: calls("fuel_surcharge", 0, v["from_km"], v["from_km"] + 1, v["from_km"] + 37.25, 500, 1234,
                          v["from_km"] - 1, 99.9, 2500, 777),
          (Detail("from_km", "The first {value} kilometres have no surcharge.",
                  ("free", "from how far", "threshold", "from what distance", "no surcharge", "start")),
           (20, 50, 100, 150)),
          (Detail("per_km", "Each kilometre beyond that adds {value}.",
                  ("per km", "per kilometre", "each km", "each kilometre", "a km", "a kilometre", "rate")),
           (0.02, 0.05, 0.07, 0.1, 0.12)),
          (Detail("digits", digits_fact("The surcharge"), ROUNDING),
           (0, 1, 2)),
          outline=Outline("The result is ((the larger of 0 and (distance_km minus {from_km})) times {per_km}) rounded "
                          "to {digits}.",
                          {"from_km": "the free distance",
                           "per_km": "the rate per kilometre",
                           "digits": "the number of decimal places"})),
)
# fmt: on

MULTI_FACT = TaskFamily("procedural_multi", TRAIN_TEMPLATES, UNSEEN_TEMPLATES, VALIDATION_UNSEEN_TEMPLATES,
                        WARM_START_TEMPLATES, id_prefix="multi")


def generate_tasks(count: int, split: Split = "train", seed: int = 0,
                   templates: str | Sequence[str] | None = None) -> list[dict[str, Any]]:
    """``count`` distinct multi-fact task rows of a split, deterministic for ``seed``; as
    :func:`colbench_gym.tasks.procedural.generate_tasks` draws them (seen and unseen parts, interleaved)."""
    return MULTI_FACT.generate_tasks(count, split, seed, templates)


def warm_start_tasks(count: int | None = None, seed: int = 0, templates: Sequence[str] | None = None
                     ) -> list[dict[str, Any]]:
    """``count`` (default 400) distinct tasks of the multi-fact warm-start pool (ids ``multi-warm-start-...``)."""
    return MULTI_FACT.warm_start_tasks(count, seed, templates)


def warm_start_template(name: str) -> FactTemplate:
    """A template of the multi-fact warm-start pool by name (its details carry the expert's questions)."""
    return MULTI_FACT.warm_start_template(name)  # type: ignore[return-value]


def load_procedural_multi(split: str) -> list[dict[str, Any]]:
    """The named splits, seed 0: ``train`` (400 tasks), ``validation`` and ``test`` (80 each, 40% from unseen
    templates of their own) and ``warm_start`` (400 tasks of the warm-start pool)."""
    return MULTI_FACT.load(split)
