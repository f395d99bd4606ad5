"""Facts: the sentences the human can say, the words a question needs to get each, and the knowledge
built from one reference."""

from __future__ import annotations

from dataclasses import dataclass

from colbench_gym.simulators.offline_backend.leaks import LeakGuard
from colbench_gym.simulators.offline_backend.words import number_forms, stem, word_stems


@dataclass
class Fact:
    """One sentence the human can say, with what a question must mention to get it."""

    text: str
    keywords: frozenset[str]
    literals: frozenset[str]
    order: int
    volunteer: float = 1.0
    """How worth saying unprompted (constants and decisions above plumbing)."""
    kind: str = "code"
    """'code'; 'return' (what the function gives back); 'signature' (its name and inputs); 'shape'
    (what an input looks like); 'note' (a comment in the reference, said as it is)."""
    lead: str = ""
    """The conditions the sentence starts with ('For each item in cart, if ...'), for merging replies."""
    action: str = ""
    """The rest of the sentence ('total increases by price')."""
    subject: frozenset[str] = frozenset()
    """Words of the name this fact defines; a question naming it all gets this fact first."""
    defines: frozenset[str] = frozenset()
    """Variables this fact sets or changes."""
    uses: frozenset[str] = frozenset()
    """Variables this fact reads, to find the constants and updates an answer relies on."""


@dataclass
class Knowledge:
    """Everything the human can say about one hidden reference, built once and cached."""

    facts: list[Fact]
    idf: dict[str, float]
    guard: LeakGuard
    is_code: bool
    name_words: frozenset[str] = frozenset()


class Collector:
    """Collects the words, literal values, names and concept tags an expression mentions."""

    def __init__(self) -> None:
        self.keywords: set[str] = set()
        self.literals: set[str] = set()
        self.names: set[str] = set()

    def tag(self, *words: str) -> None:
        self.keywords.update(stem(w) for w in words)

    def name(self, identifier: str) -> None:
        self.keywords.update(word_stems(identifier))

    def literal(self, value: object) -> None:
        if isinstance(value, str):
            text = value.strip()
            if text and len(text) <= 40:
                self.literals.add(text.lower())
            self.keywords.update(word_stems(value[:200]))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            forms = number_forms(value)
            self.literals.update(forms)
            self.keywords.update(forms)
        elif value is None:
            self.tag("none", "missing", "empty", "nothing")
        elif isinstance(value, bool):
            self.tag("true" if value else "false")


def fact_sentence(lead: str, action: str) -> str:
    """The conditions and the rest joined into one sentence, capitalised, with its full stop."""
    text = f"{lead}, {action}" if lead else action
    text = text.strip()
    text = text[0].upper() + text[1:] if text else text
    return text if text.endswith((".", "!", "?")) else text + "."
