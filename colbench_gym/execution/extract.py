"""Pull the Python code out of a model's answer (Markdown fences and all).

    from colbench_gym.execution import extract_code

    extract_code("Here it is:\\n```python\\ndef f():\\n    return 1\\n```")   # -> "def f():\\n    return 1"

The answer is read once, line by line, in time linear in its length: a fence is a line of three or
more backticks or tildes (indented or not) and an optional info string; a block ends at the next
bare fence of the same character and at least the same length. Where that first ending cuts Python
code short (a fence inside a docstring), the block is extended to a later ending if that makes it
parse; the extra parsing is capped at a few times the answer's length.
"""

from __future__ import annotations

import ast
import os
import re
import warnings
from dataclasses import dataclass

_PYTHON_TAGS = {"python", "py", "python3", "py3"}
_LANGUAGE = re.compile(r"[\w+#.-]*")
# Characters that trying longer blocks may read and parse: this many per character of the answer,
# plus a floor, so that extending is linear overall however many fences an answer holds.
_EXTENSION_BUDGET_PER_CHAR = 3
_EXTENSION_BUDGET_FLOOR = 20_000


def extract_code(text: str) -> str:
    """Return the code in ``text``.

    - Fenced blocks tagged ``python``/``py``/``python3``/``py3``: all of them, joined by blank lines.
    - Otherwise untagged fenced blocks (```` ``` ... ``` ````): all of them, joined.
    - Otherwise blocks with another language tag: the first one.
    - A fence on one line (```` ```python def f(): return 1``` ````) is a block too.
    - A python or untagged block that does not parse is extended past a closing fence when the longer
      block parses (the fence was inside a string of the code, such as a docstring's example).
    - No closed block, one opening fence: an opening fence (tagged, or followed by code) keeps what
      follows it (an answer cut off before its closing fence); a closing fence keeps what precedes it
      (an answer whose opening fence was in the prompt, followed by prose).
    - No fences at all: the stripped text.

    Blocks are dedented (fences indented in a list item) and stripped; line endings become ``\\n``.
    Linear time in ``len(text)``.
    """
    if not isinstance(text, str):
        raise TypeError(f"extract_code expects a str, got {type(text).__name__}")
    scan = _Scan(text.replace("\r\n", "\n").replace("\r", "\n"))
    scan.run()
    if not scan.blocks:
        return scan.unmatched()
    for tier in (_PYTHON_TAGS, {""}):
        chosen = [body for lang, body in scan.blocks if lang in tier and body]
        if chosen:
            return "\n\n".join(chosen)
    return next((body for _, body in scan.blocks if body), "")


@dataclass(frozen=True)
class _Fence:
    char: str  # "`" or "~"
    length: int
    info: str  # the rest of the line, stripped

    @property
    def language(self) -> str:
        match = _LANGUAGE.match(self.info)
        return match.group().lower() if match else ""

    def closed_by(self, other: _Fence | None) -> bool:
        return other is not None and other.char == self.char and other.length >= self.length and not other.info

    def one_line_block(self) -> tuple[str, str] | None:
        """``(language, body)`` of a fence opened and closed on its own line, else None."""
        if self.char != "`" or not self.info.endswith("```"):
            return None
        inner = self.info.rstrip("`").strip()
        if not inner:
            return None
        words = inner.split(None, 1)
        if words[0].lower() in _PYTHON_TAGS:
            return "python", words[1].strip() if len(words) > 1 else ""
        return "", inner


def _fence_of(line: str) -> _Fence | None:
    stripped = line.lstrip(" \t")
    char = stripped[:1]
    if char not in ("`", "~") or not stripped.startswith(char * 3):
        return None
    length = len(stripped) - len(stripped.lstrip(char))
    return _Fence(char, length, stripped[length:].strip())


class _Scan:
    """One pass over an answer's lines: closed blocks in order, and an opening fence left open.

    ``work`` counts the lines visited and the characters handed to the parser (kept linear).
    """

    def __init__(self, text: str) -> None:
        self.lines = text.split("\n")
        self.fences = [_fence_of(line) for line in self.lines]
        self.starts = [0]  # where each line starts in the text, and one past the end
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line) + 1)
        self.budget = _EXTENSION_BUDGET_PER_CHAR * len(text) + _EXTENSION_BUDGET_FLOOR
        self.blocks: list[tuple[str, str]] = []
        self.unclosed: int | None = None
        self.work = 0

    def run(self) -> _Scan:
        index = 0
        while index < len(self.lines):
            self.work += 1
            fence = self.fences[index]
            if fence is None:
                index += 1
                continue
            one_line = fence.one_line_block()
            if one_line is not None:
                self.blocks.append(one_line)
                index += 1
                continue
            end = self._first_closing(index, fence)
            if end is None:
                self.unclosed = index  # the rest of the answer is this block's, never closed
                break
            language = fence.language
            body = self._body(index, end)
            if body and (language in _PYTHON_TAGS or not language) and not self._parses(body):
                end, body = self._extend(index, end, fence) or (end, body)
            self.blocks.append((language, body))
            index = end + 1
        return self

    def _first_closing(self, opening: int, fence: _Fence) -> int | None:
        for index in range(opening + 1, len(self.lines)):
            self.work += 1
            if fence.closed_by(self.fences[index]):
                return index
        return None

    def _extend(self, opening: int, end: int, fence: _Fence) -> tuple[int, str] | None:
        """The first later closing fence (or the end of the answer) up to which the block parses."""
        for index in range(end + 1, len(self.lines) + 1):
            step = 1 + len(self.lines[index - 1])  # walking is paid for too, or many fences go quadratic
            if step > self.budget:
                return None
            self.budget -= step
            self.work += 1
            if index < len(self.lines) and not fence.closed_by(self.fences[index]):
                continue
            size = self.starts[index] - self.starts[opening + 1]
            if size > self.budget:
                return None
            self.budget -= size
            body = self._body(opening, index)
            if self._parses(body):
                return index, body
        return None

    def _body(self, opening: int, end: int) -> str:
        return _tidy(self.lines[opening + 1 : end])

    def _parses(self, code: str) -> bool:
        self.work += len(code)
        return _parses(code)

    def unmatched(self) -> str:
        """The answer when no block was closed: split around its one opening fence, if any."""
        if self.unclosed is None:
            return "\n".join(self.lines).strip()
        fence = self.fences[self.unclosed]
        assert fence is not None
        before = _tidy(self.lines[: self.unclosed])
        following = zip(self.lines[self.unclosed + 1 :], self.fences[self.unclosed + 1 :])
        after = _tidy([line for line, other in following if other is None])
        glued = after.rstrip(fence.char)  # "return 1```": a closing fence typed at the end of the code
        if len(after) - len(glued) >= 3:
            after = glued.rstrip()
        if fence.info or not before:
            return after
        # An untagged fence between two parts: the code is the part that parses (prose rarely does).
        if _parses(before) or not _parses(after):
            return before
        return after


def _tidy(lines: list[str]) -> str:
    """Join lines, remove their common indentation, strip the result."""
    indents = [line[: len(line) - len(line.lstrip(" \t"))] for line in lines if line.strip(" \t")]
    prefix = os.path.commonprefix(indents) if indents else ""
    if prefix:
        lines = [line[len(prefix) :] if line.startswith(prefix) else "" for line in lines]
    return "\n".join(lines).strip()


def _parses(code: str) -> bool:
    # Model-written code is probed here, not run: its compile-time warnings ("invalid decimal literal" for `1if`,
    # "invalid escape sequence") would fill every collection's log with lines about the model's code.
    # catch_warnings swaps process-wide filters; two threads that overlap here can at worst leave these two
    # warning kinds ignored, which a lock would not be worth (a lock held across a fork hangs the child).
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return bool(code)
