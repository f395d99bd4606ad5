"""Replies: the chosen facts said in at most two sentences, with the constant the first one relies on."""

from __future__ import annotations

from collections.abc import Sequence

from colbench_gym.simulators.offline_backend.facts import Fact, Knowledge, fact_sentence
from colbench_gym.simulators.offline_backend.phrasing import say_identifier

MAX_REPLY_CHARS = 400
MAX_FACTS_PER_REPLY = 3


def _without_shared_lead(fact: Fact, lead: str) -> str:
    if not lead or not fact.lead or not fact.action:
        return fact.text
    if fact.lead == lead:
        return fact_sentence("", fact.action)
    if fact.lead.startswith(lead + ", "):
        return fact_sentence(fact.lead[len(lead) + 2:], fact.action)
    return fact.text


def fit_reply(facts: Sequence[Fact], limit: int = MAX_REPLY_CHARS) -> str:
    """At most two sentences: the first fact, then 'Also, ...' joining the rest with semicolons.

    A later fact under the same conditions as the first drops them ('Also, amount is 5'), so a
    reply does not repeat 'for each name and grams in ingredients' three times.
    """
    texts = [facts[0].text] + [_without_shared_lead(fact, facts[0].lead) for fact in facts[1:]]
    first = texts[0]
    if len(first) > limit:
        first = first[: limit - 3].rsplit(" ", 1)[0].rstrip(",;") + "..."
        return first
    reply = first
    rest: list[str] = []
    for text in texts[1:]:
        clause = text.rstrip(".")
        if clause[:2] not in ("I ", "I'") and not clause[:2].isupper():  # keep 'I' and acronyms
            clause = clause[0].lower() + clause[1:]
        candidate = reply + " Also, " + "; ".join(rest + [clause]) + "."
        if len(candidate) > limit:
            break
        rest.append(clause)
    if rest:
        reply = reply + " Also, " + "; ".join(rest) + "."
    return reply


def definition_of(fact: Fact, knowledge: Knowledge, already: Sequence[Fact]) -> Fact | None:
    """The fact an answer relies on: the constant it names ('fee rate is 0.015'), or, when the
    answer is just 'the result is ranks', how ``ranks`` is filled."""
    bare_result = fact.kind == "return" and len(fact.uses) == 1 and fact.action == (
        "the result is " + say_identifier(next(iter(fact.uses))))
    for name in sorted(fact.uses):
        if name in fact.defines:
            continue
        candidates = [c for c in knowledge.facts if name in c.defines and c is not fact and c not in already
                      and c.kind == "code" and c.volunteer >= 0.7]
        with_constants = [c for c in candidates if c.literals]
        if with_constants:
            return with_constants[0]
        if bare_result and candidates:
            return candidates[-1]  # the last update says what ends up in it
    return None
