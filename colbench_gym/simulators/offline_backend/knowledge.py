"""Knowledge: a reference turned into facts once (cached), whether it is code or prose."""

from __future__ import annotations

import ast
import math
import re
from collections import Counter
from collections.abc import Sequence
from functools import lru_cache

from colbench_gym.simulators.offline_backend.extraction import FactBuilder
from colbench_gym.simulators.offline_backend.facts import Collector, Fact, Knowledge
from colbench_gym.simulators.offline_backend.leaks import LEAK_LINE_CHARS, LeakGuard
from colbench_gym.simulators.offline_backend.replies import MAX_REPLY_CHARS
from colbench_gym.simulators.offline_backend.words import word_stems

# A reference is a short function; these bound the work on a pathological one (a huge data table).
_MAX_SOURCE_CHARS = 60_000
_MAX_FACTS = 800


_CODE_HINT = re.compile(r"^\s*(def |class |import |from \S+ import |return\b|if .*:\s*$|for .*:\s*$)", re.MULTILINE)


def _looks_like_code(text: str) -> bool:
    return bool(_CODE_HINT.search(text))


def _parse_leniently(text: str) -> ast.Module | None:
    """Parse the reference; a truncated tail (a common export glitch) is dropped line by line."""
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        pass
    lines = text.splitlines()
    for cut in range(len(lines) - 1, max(len(lines) - 30, 0), -1):
        try:
            tree = ast.parse("\n".join(lines[:cut]))
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        if tree.body:
            return tree
    return None


def _parse_strictly(text: str) -> ast.Module | None:
    """Text without the look of code counts as code only if it parses and defines something, so
    prose such as 'Discount\nMembers get 15%' is not mistaken for a Python expression."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    defines = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign, ast.Lambda)
    return tree if any(isinstance(node, defines) for node in ast.walk(tree)) else None


def _prose_facts(text: str) -> list[Fact]:
    sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+|\n+", text) if len(s.strip()) > 2]
    facts = []
    for order, sentence in enumerate(sentences[:500]):
        shown = sentence
        if len(shown) > MAX_REPLY_CHARS:
            shown = shown[: MAX_REPLY_CHARS - 3].rsplit(" ", 1)[0] + "..."
        out = Collector()
        out.keywords.update(word_stems(sentence))
        for number in re.findall(r"\d+(?:\.\d+)?", sentence):
            out.literals.add(number)
        facts.append(Fact(shown, frozenset(out.keywords), frozenset(out.literals), order))
    return facts


def _idf(facts: Sequence[Fact]) -> dict[str, float]:
    counts: Counter[str] = Counter()
    for fact in facts:
        counts.update(fact.keywords)
    total = max(len(facts), 1)
    return {word: math.log(1.0 + total / count) for word, count in counts.items()}


@lru_cache(maxsize=1024)
def build_knowledge(hidden_information: str) -> Knowledge:
    """Turn hidden information into facts (cached: the same reference is parsed once)."""
    text = hidden_information if isinstance(hidden_information, str) else str(hidden_information)
    guard = LeakGuard({line.strip() for line in text.splitlines() if len(line.strip()) > LEAK_LINE_CHARS})
    is_code = _looks_like_code(text)
    source = text if len(text) <= _MAX_SOURCE_CHARS else text[:_MAX_SOURCE_CHARS].rsplit("\n", 1)[0]
    tree = _parse_leniently(source) if is_code else _parse_strictly(source)
    facts: list[Fact] = []
    name_words: set[str] = set()
    if tree is not None and tree.body:
        builder = FactBuilder(source, tree)
        try:
            facts = builder.build()[:_MAX_FACTS]
        except RecursionError:
            facts = []
        for name in builder.main_names:
            name_words.update(word_stems(name))
        for name in builder.parameters:  # 'weights' in calculate_weighted_score(reviews, weights) is a topic
            name_words.difference_update(word_stems(name))
        is_code = is_code or bool(facts)
    if not facts and not is_code:
        facts = _prose_facts(text)
    if is_code:
        facts = [f for f in facts if not guard.leaks(f.text)]
    return Knowledge(facts, _idf(facts), guard if is_code else LeakGuard(()), is_code, frozenset(name_words))
