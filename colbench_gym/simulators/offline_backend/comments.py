"""The reference's comments: the words they lend to nearby facts, and the notes they are worth saying."""

from __future__ import annotations

import ast
import io
import re
import tokenize

from colbench_gym.simulators.offline_backend.facts import Collector, Fact
from colbench_gym.simulators.offline_backend.words import number_forms, word_stems

_CODE_COMMENT = re.compile(r"==|!=|\w\s*=\s*\w|\w\(\)|^\s*(return|if|for|while|def|import|print|elif|else)\b|:\s*$"
                           r"|^\s*(noqa|type:|pragma|pylint|fmt:)")


def comments_by_line(source: str) -> dict[int, str]:
    """Each comment's text by its line number (none where the source does not tokenize)."""
    comments: dict[int, str] = {}
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.COMMENT:
                comments[token.start[0]] = token.string.lstrip("#").strip()
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass
    return comments


def nearby_comment_words(comments: dict[int, str], node: ast.AST) -> set[str]:
    """Words of comments on a statement's own lines and in the comment block right above it."""
    start = getattr(node, "lineno", None)
    if start is None:
        return set()
    end = getattr(node, "end_lineno", start) or start
    if isinstance(node, (ast.If, ast.For, ast.While, ast.With, ast.Try, ast.FunctionDef)):
        end = start  # a block's body has its own comments
    words: set[str] = set()
    for line in range(start, end + 1):
        if line in comments:
            words.update(word_stems(comments[line]))
    line = start - 1
    while line in comments:
        words.update(word_stems(comments[line]))
        line -= 1
    return words


def comment_facts(comments: dict[int, str], first_order: int) -> list[Fact]:
    """Comments are the human's own notes: each informative one can be said as it is, numbered on from
    ``first_order``."""
    facts: list[Fact] = []
    for line in sorted(comments):
        comment = comments[line].strip()
        content = word_stems(comment)
        if len(content) < 2 or _CODE_COMMENT.search(comment) or len(comment) > 200:
            continue
        out = Collector()
        out.keywords.update(content)
        out.tag("note")
        for number in re.findall(r"(?<![\w.])\d+(?:\.\d+)?", comment):
            out.literals.update(number_forms(float(number) if "." in number else int(number)))
        for quoted in re.findall(r"'([^']{1,40})'|\"([^\"]{1,40})\"", comment):
            out.literals.add((quoted[0] or quoted[1]).strip().lower())
        informative = bool(out.literals)
        text = comment[0].upper() + comment[1:]
        text = text if text.endswith((".", "!", "?")) else text + "."
        facts.append(Fact(f"Note: {text}", frozenset(out.keywords), frozenset(out.literals),
                          first_order + len(facts), 1.1 if informative else 0.4, "note", "", f"note: {text}"))
    return facts
