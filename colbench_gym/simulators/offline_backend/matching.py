"""Question matching: how a question is read, and how well each fact answers it."""

from __future__ import annotations

import re
from dataclasses import dataclass

from colbench_gym.simulators.offline_backend.facts import Fact, Knowledge
from colbench_gym.simulators.offline_backend.words import GENERIC_ASK, RAW_TOKEN_RE, SYNONYM_STEMS, stem, word_stems


@dataclass(frozen=True)
class Question:
    """A message read once: its word stems and their synonyms, and its raw text, tokens and numbers
    for the literal values it names."""

    words: tuple[str, ...]
    expanded: frozenset[str]
    raw_lower: str
    raw_tokens: frozenset[str]
    numbers: frozenset[str]


_ENUMERATOR = re.compile(r"(?m)(?:^|(?<=\s))\(?\d{1,2}[.)](?=\s+[A-Za-z])")


def read_question(text: str) -> Question:
    text = _ENUMERATOR.sub(" ", text)  # '1. What ...' numbers the question, it does not ask about 1
    words = tuple(dict.fromkeys(word_stems(text)))
    expanded = {s for w in words for s in SYNONYM_STEMS.get(w, ())} - set(words)
    raw_tokens = frozenset(RAW_TOKEN_RE.findall(text))
    numbers = set(re.findall(r"(?<![\w.])-?\d+(?:\.\d+)?", text))
    numbers |= {n.replace(",", "") for n in re.findall(r"\d{1,3}(?:,\d{3})+", text)}
    return Question(words, frozenset(expanded), text.lower(), raw_tokens, frozenset(numbers))


def _literal_hit(literal: str, question: Question) -> bool:
    if literal in question.numbers:
        return True
    if not literal or literal[0].isdigit():
        return False
    if not any(ch.isalnum() for ch in literal):
        # punctuation such as '?' counts only when quoted, not as the question's own punctuation
        return f"'{literal}'" in question.raw_lower or f'"{literal}"' in question.raw_lower
    if len(literal) == 1:
        # a one-letter value ('A', 'Y', 'X') as a word of its own, in capitals, but not the pronoun 'I'
        upper = literal.upper()
        return upper != "I" and upper in question.raw_tokens or f"'{literal}'" in question.raw_lower
    if len(literal) <= 2:
        return any(token.lower() == literal for token in question.raw_tokens)
    return re.search(r"(?<![a-z0-9])" + re.escape(literal) + r"(?![a-z0-9])", question.raw_lower) is not None


_ASKS_SHAPE = frozenset(stem(w) for w in (
    "format", "type", "structure", "shape", "look", "input", "list", "dict", "dictionary", "mapping", "key",
    "field", "entry", "contain", "number", "text", "string", "flag", "boolean", "record", "object", "data"))
# Asking what an input is like: 'What format are the inputs in?', not 'What if the input is empty?'.
_ASKS_INPUT = frozenset(stem(w) for w in ("format", "structure", "type", "look", "shape", "kind"))
_ASKS_SIGNATURE = frozenset(stem(w) for w in ("argument", "parameter", "signature", "arg", "param", "take"))


def score_fact(fact: Fact, question: Question, knowledge: Knowledge) -> tuple[float, bool]:
    """(score, whether a topical word matched): rare shared words weigh most, named literals more."""
    score = 0.0
    topical = False
    if fact.kind == "shape" and not (fact.subject & set(question.words) or _ASKS_INPUT & set(question.words)):
        return 0.0, False  # 'is it a text?' is an answer only when the question is about this input
    if fact.subject and fact.kind != "shape" and fact.subject.issubset(question.words):
        score += 1.0
        topical = not fact.subject.issubset(GENERIC_ASK)
    for word in question.words:
        if word in fact.keywords:
            weight = knowledge.idf.get(word, 0.0)
            if word in knowledge.name_words or word in GENERIC_ASK:
                weight *= 0.3
            else:
                topical = True
            score += weight
    for word in question.expanded:
        if word in fact.keywords:
            score += 0.5 * knowledge.idf.get(word, 0.0)
            if word not in knowledge.name_words:
                topical = True
    for literal in fact.literals:
        if _literal_hit(literal, question):
            score += 2.0
            topical = True
    if fact.kind == "signature" and not _ASKS_SIGNATURE.intersection(question.words):
        score *= 0.4  # every parameter name is in it; say it only when inputs are the topic
    elif fact.kind == "shape" and not _ASKS_SHAPE.intersection(question.words) \
            and not _ASKS_SHAPE.intersection(question.expanded):
        score *= 0.5
    return score, topical
