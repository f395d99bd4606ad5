"""Never quoting the reference: which texts contain a whole long line of its source."""

from __future__ import annotations

from collections.abc import Iterable

# A source line at least this long is never repeated verbatim in a reply.
LEAK_LINE_CHARS = 30


class LeakGuard:
    """Finds whether a text contains a whole long source line, in time linear in the text:
    lines are indexed by their first characters, so a 5000-line reference costs no more."""

    _KEY = 16  # every guarded line is longer than LEAK_LINE_CHARS > _KEY

    def __init__(self, lines: Iterable[str]) -> None:
        self.by_prefix: dict[str, list[str]] = {}
        for line in lines:
            self.by_prefix.setdefault(line[: self._KEY], []).append(line)

    def __bool__(self) -> bool:
        return bool(self.by_prefix)

    def leaks(self, text: str) -> bool:
        if not self.by_prefix:
            return False
        for start in range(len(text) - self._KEY + 1):
            for line in self.by_prefix.get(text[start:start + self._KEY], ()):
                if text.startswith(line, start):
                    return True
        return False
