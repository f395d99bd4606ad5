"""Asked facts only: the human of a multi-fact task says a hidden fact only when the question names its detail.

A task row selects this behaviour with ``"reveal": "asked_facts_only"`` and lists its hidden facts, one per hidden
detail, each with the words that ask for it::

    "reveal": "asked_facts_only",
    "hidden_facts": [
        {"detail": "rate", "fact": "Each late day adds 0.25 to the fine.", "asked_by": ["rate", "per day", ...]},
        {"detail": "cap", "fact": "The fine is never more than 20.", "asked_by": ["cap", "maximum", ...]},
    ],
    "outline": "If days_late is at most the free days, the result is 0. Otherwise ... and the cap.",

The ``outline`` (optional) says what the function does with every hidden detail named and none valued: the words an
agent can ask for the details with, and the frame its answer fills in.

The reply to a message is decided in this order:

1. Every fact whose detail the message names (one of its ``asked_by`` phrases occurs in it), in the row's order:
   a question naming one detail gets that fact and no other, one naming every detail gets them all.
2. A message that names no detail but asks in general ("Anything else?", "Can you tell me more?", "What should the
   function do?") gets the outline if the row has one and it was not said yet; otherwise the first fact not yet said
   in the dialogue, one fact at most; when every fact was said, :data:`NOTHING_MORE`.
3. Anything else gets :data:`~colbench_gym.simulators.base.DONT_KNOW`.

A phrase occurs in a message when its words, stemmed (``rounded`` and ``rounding`` are ``round``), appear in the
message in the same order and next to each other; ``#`` in a phrase stands for any number ("exactly #" is met by
"exactly 18"). Facts are plain sentences written by the task's author, so a reply never quotes the reference.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from colbench_gym.simulators.base import DONT_KNOW
from colbench_gym.simulators.offline_backend.words import stem

REVEAL_FIELD = "reveal"
ASKED_FACTS_ONLY = "asked_facts_only"
FACTS_FIELD = "hidden_facts"
OUTLINE_FIELD = "outline"
REVEAL_MODES = (ASKED_FACTS_ONLY,)
NOTHING_MORE = "That is everything I can tell you."
ANY_NUMBER = "#"

_TOKEN = re.compile(r"[a-z]+|\d+(?:\.\d+)?|[<>]=?|%")
_NUMBER = re.compile(r"\d")
# Asking for anything at all, without naming a detail.
_ASKS_IN_GENERAL = re.compile(
    r"\b(anything else|any other|other (details?|requirements?|rules?|cases?)|more (details?|information|info)|"
    r"edge cases?|special cases?|requirements?|specifications?|constraints?|what else|details?|clarify|"
    r"tell me (more|about)|describe|explain|how (should|does|do|would|will) (it|the function|this|that) "
    r"(work|behave)|what (should|does|do|would|will) (it|the function|this|that) (do|return|output|give)|"
    r"what should .{0,60}(return|output|give))\b",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class HiddenFact:
    """One hidden detail: the sentence the human says about it, and the phrases that ask for it."""

    detail: str
    fact: str
    asked_by: tuple[str, ...]


def tokens(text: str) -> tuple[str, ...]:
    """The stemmed words, numbers and comparison signs of ``text``, lower-cased, in order."""
    return tuple(token if not token[0].isalpha() else stem(token) for token in _TOKEN.findall(text.lower()))


def _occurs(phrase: Sequence[str], words: Sequence[str]) -> bool:
    size = len(phrase)
    for start in range(len(words) - size + 1):
        if all(p == w or (p == ANY_NUMBER and _NUMBER.match(w)) for p, w in zip(phrase, words[start:start + size])):
            return True
    return False


def _phrase_words(phrase: str) -> list[str]:
    """The phrase's words, with ``#`` kept (a message's numbers are words; a phrase's ``#`` is any of them)."""
    return re.findall(r"#|[a-z]+|\d+(?:\.\d+)?|[<>]=?|%", phrase.lower())


def phrase_tokens(phrase: str) -> tuple[str, ...]:
    """A phrase as :func:`named_by` matches it: stemmed words, ``#`` for any number."""
    return tuple(ANY_NUMBER if word == ANY_NUMBER else (stem(word) if word[0].isalpha() else word)
                 for word in _phrase_words(phrase))


def named_by(text: str, phrase: str) -> bool:
    """Whether ``text`` names ``phrase``; see the module docstring."""
    wanted = phrase_tokens(phrase)
    return bool(wanted) and _occurs(wanted, tokens(text))


def read_hidden_facts(rows: object) -> list[HiddenFact]:
    """The ``hidden_facts`` of a task row, checked: a list of ``{"detail", "fact", "asked_by"}`` objects."""
    if not isinstance(rows, Sequence) or isinstance(rows, (str, bytes)) or not rows:
        raise ValueError(f"{FACTS_FIELD} must be a non-empty list of facts, got {type(rows).__name__}")
    facts = []
    for index, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise ValueError(f"{FACTS_FIELD}[{index}] must be an object, got {type(row).__name__}")
        detail, fact, asked_by = row.get("detail"), row.get("fact"), row.get("asked_by")
        if not isinstance(detail, str) or not isinstance(fact, str) or not fact.strip():
            raise ValueError(f"{FACTS_FIELD}[{index}] needs a 'detail' name and a non-empty 'fact' sentence")
        if (not isinstance(asked_by, Sequence) or isinstance(asked_by, str) or not asked_by
                or not all(isinstance(p, str) and phrase_tokens(p) for p in asked_by)):
            raise ValueError(f"{FACTS_FIELD}[{index}] ({detail}): 'asked_by' must be a non-empty list of phrases")
        facts.append(HiddenFact(detail, fact.strip(), tuple(asked_by)))
    return facts


def named_facts(facts: Sequence[HiddenFact], question: str) -> list[HiddenFact]:
    """The facts whose detail ``question`` names, in their order."""
    words = tokens(question)
    return [fact for fact in facts if any(_occurs(phrase_tokens(p), words) for p in fact.asked_by)]


def asks_in_general(question: str) -> bool:
    """Whether ``question`` asks for more without naming anything ("anything else?", "what should it do?")."""
    return _ASKS_IN_GENERAL.search(question) is not None


def answer_asked_facts(facts: Sequence[HiddenFact], question: str, told: str = "", outline: str = "") -> str:
    """The reply to ``question`` (see the module docstring); ``told`` is what the human has already said."""
    if not question.strip():
        return DONT_KNOW
    asked = named_facts(facts, question)
    if asked:
        return " ".join(fact.fact for fact in asked)
    if asks_in_general(question):
        if outline and outline not in told:
            return outline
        untold = [fact for fact in facts if fact.fact not in told]
        return untold[0].fact if untold else NOTHING_MORE
    return DONT_KNOW
