"""Pull the Python code out of a model's answer (Markdown fences and all)."""

from __future__ import annotations

import ast
import re

# An opening fence (``` or ~~~, optional language tag), the body, then the same fence on its own line.
_FENCE = re.compile(
    r"^[ \t]*(?P<fence>`{3,}|~{3,})[ \t]*(?P<lang>[\w+#.-]*)[^\n]*\n(?P<body>.*?)^[ \t]*(?P=fence)[ \t]*$",
    re.MULTILINE | re.DOTALL,
)
_FENCE_LINE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*(?P<lang>[\w+#.-]*)[^\n]*$\n?", re.MULTILINE)
_PYTHON_TAGS = {"python", "py", "python3", "py3"}


def extract_code(text: str) -> str:
    """Return the code in ``text``.

    - Fenced blocks tagged ``python``/``py``: all of them, joined by blank lines.
    - Otherwise untagged fenced blocks (```` ``` ... ``` ````): all of them, joined.
    - Otherwise blocks with another language tag: the first one.
    - One unmatched fence: an opening fence (tagged, or followed by code) keeps what follows it (an
      answer cut off before its closing fence); a closing fence keeps what precedes it (an answer whose
      opening fence was in the prompt, followed by prose).
    - No fences at all: the stripped text.
    """
    if not isinstance(text, str):
        raise TypeError(f"extract_code expects a str, got {type(text).__name__}")
    blocks = [(m.group("lang").lower(), m.group("body")) for m in _FENCE.finditer(text)]
    if not blocks:
        return _unmatched_fence(text)
    python = [body for lang, body in blocks if lang in _PYTHON_TAGS]
    if python:
        return "\n\n".join(body.strip("\n") for body in python).strip()
    untagged = [body for lang, body in blocks if not lang]
    if untagged:
        return "\n\n".join(body.strip("\n") for body in untagged).strip()
    return blocks[0][1].strip()


def _unmatched_fence(text: str) -> str:
    fence = _FENCE_LINE.search(text)
    if fence is None:
        return text.strip()
    before = text[: fence.start()].strip()
    after = _FENCE_LINE.sub("", text[fence.end() :]).strip()
    if fence.group("lang") or not before:
        return after
    # An untagged fence between two parts: the code is the part that parses (prose rarely does).
    if _parses(before) or not _parses(after):
        return before
    return after


def _parses(code: str) -> bool:
    try:
        ast.parse(code)
    except (SyntaxError, ValueError):
        return False
    return bool(code)
