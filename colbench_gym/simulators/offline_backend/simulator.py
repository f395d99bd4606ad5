"""The simulator: picks which facts answer the agent's latest message, and when to say it does not know."""

from __future__ import annotations

import re
from collections.abc import Sequence

from colbench_gym.simulators.base import DONT_KNOW, SimulatorReply, SimulatorRequest
from colbench_gym.simulators.offline_backend.asked_facts import (
    FACTS_FIELD,
    OUTLINE_FIELD,
    REVEAL_FIELD,
    REVEAL_MODES,
    answer_asked_facts,
    read_hidden_facts,
)
from colbench_gym.simulators.offline_backend.facts import Fact, Knowledge
from colbench_gym.simulators.offline_backend.knowledge import build_knowledge
from colbench_gym.simulators.offline_backend.matching import Question, read_question, score_fact
from colbench_gym.simulators.offline_backend.replies import (
    MAX_FACTS_PER_REPLY,
    MAX_REPLY_CHARS,
    definition_of,
    fit_reply,
)
from colbench_gym.simulators.offline_backend.words import GENERIC_ASK, stem, word_stems

# Questions are long only by accident (pasted code, logs); the question itself sits at the ends.
_QUESTION_HEAD_CHARS = 2000
_QUESTION_TAIL_CHARS = 2000
# Where one question ends and the next begins: after '?', at line breaks, before '2.' / '3)'.
_QUESTION_PARTS = re.compile(r"(?<=\?)\s+|\n+|\s(?=\d[.)]\s)")
_RETURN_ASK = frozenset(stem(w) for w in ("return", "output", "result", "produce"))
# Words that ask about the result's form without naming anything in particular.
_RESULT_WORDS = frozenset(stem(w) for w in ("format", "type", "kind", "look", "form", "structure", "shape", "style",
                                            "data", "final", "expected", "thing", "way", "exact"))
_GENERIC_REQUEST = re.compile(
    r"\b(anything else|any other|other (details|requirements|rules|cases)|more (details|information|info)|"
    r"edge cases?|special cases?|requirements?|specifications?|constraints?|what else|details?|clarify|"
    r"tell me (more|about)|describe|explain|how should (it|the function) (work|behave))\b",
    re.IGNORECASE,
)


class OfflineBackendSimulator:
    """The human for backend tasks, answering from the hidden reference without any model.

    Args:
        max_facts: most facts stated in one reply (1-3 is natural for a person).
        max_chars: longest reply, in characters.
        min_score: weakest match still answered; below it the human says "I don't know."
            or, when asked for details in general, volunteers something not yet said.
        volunteer: whether general questions ("any other requirements?") get untold facts.

    ``reply(request)`` never raises: a malformed request gets ``DONT_KNOW`` with ``error`` set.

    A task whose row says ``"reveal": "asked_facts_only"`` (the multi-fact tasks of
    :mod:`colbench_gym.tasks.procedural_multi`) is answered from its ``hidden_facts`` instead of the reference: only
    the facts a question names, see :mod:`.asked_facts`.
    """

    def __init__(self, max_facts: int = MAX_FACTS_PER_REPLY, max_chars: int = MAX_REPLY_CHARS,
                 min_score: float = 0.6, volunteer: bool = True) -> None:
        if not 1 <= max_facts <= 10:
            raise ValueError(f"max_facts must be between 1 and 10, got {max_facts}")
        if max_chars < 40:
            raise ValueError(f"max_chars must be at least 40, got {max_chars}")
        self.max_facts = max_facts
        self.max_chars = max_chars
        self.min_score = min_score
        self.volunteer = volunteer

    def reply(self, request: SimulatorRequest) -> SimulatorReply:
        task = getattr(request, "task", None)
        hidden = getattr(task, "hidden_information", None)
        if hidden is None:
            kind = type(task).__name__
            return SimulatorReply(DONT_KNOW, error=f"OfflineBackendSimulator needs a backend task with "
                                                   f"hidden_information, got {kind}")
        if not isinstance(hidden, str) or not hidden.strip():
            return SimulatorReply(DONT_KNOW)
        messages = getattr(request, "messages", None) or []
        question, told = self._dialogue(messages)
        reveal = (getattr(task, "extra", None) or {}).get(REVEAL_FIELD)
        if reveal is not None:
            return self._reply_by_reveal(task, reveal, question, told)
        try:
            text = self.answer(hidden, question, told)
        except Exception as err:  # noqa: BLE001 - one odd turn must not end a batch of dialogues
            return SimulatorReply(DONT_KNOW, error=f"offline simulator failed on this turn: {err!r}")
        return SimulatorReply(text)

    @staticmethod
    def _reply_by_reveal(task: object, reveal: object, question: str, told: str) -> SimulatorReply:
        """The reply of a task whose row says what the human reveals (``"reveal"``): with ``asked_facts_only``, the
        facts of the row's ``hidden_facts`` that the question names, and nothing from the reference."""
        if reveal not in REVEAL_MODES:
            return SimulatorReply(DONT_KNOW, error=f"unknown {REVEAL_FIELD} {reveal!r} in the task row; the offline "
                                                   f"human knows {list(REVEAL_MODES)}")
        try:
            facts = read_hidden_facts(getattr(task, "extra", {}).get(FACTS_FIELD))
            if len(question) > _QUESTION_HEAD_CHARS + _QUESTION_TAIL_CHARS:
                question = question[:_QUESTION_HEAD_CHARS] + " " + question[-_QUESTION_TAIL_CHARS:]
            outline = getattr(task, "extra", {}).get(OUTLINE_FIELD) or ""
            if not isinstance(outline, str):
                raise ValueError(f"{OUTLINE_FIELD} must be a text, got {type(outline).__name__}")
            return SimulatorReply(answer_asked_facts(facts, question, told, outline))
        except Exception as err:  # noqa: BLE001 - one odd row must not end a batch of dialogues
            return SimulatorReply(DONT_KNOW, error=f"offline simulator failed on this turn: {err!r}")

    @staticmethod
    def _dialogue(messages: Sequence[object]) -> tuple[str, str]:
        """(latest agent message, everything the human has said after the task description)."""
        question = ""
        human_turns: list[str] = []
        for message in messages:
            if not isinstance(message, dict):
                continue
            content = message.get("content")
            content = content if isinstance(content, str) else ""
            if message.get("role") == "assistant":
                question = content
            elif message.get("role") == "user":
                human_turns.append(content)
        return question, "\n".join(human_turns[1:])

    def answer(self, hidden_information: str, question: str, told: str = "") -> str:
        """The reply to ``question`` given the hidden reference; ``told`` is what was already said."""
        knowledge = build_knowledge(hidden_information)
        if not knowledge.facts or not question.strip():
            return DONT_KNOW
        if len(question) > _QUESTION_HEAD_CHARS + _QUESTION_TAIL_CHARS:
            question = question[:_QUESTION_HEAD_CHARS] + " " + question[-_QUESTION_TAIL_CHARS:]
        parsed = read_question(question)
        ranked = self._rank(knowledge, parsed)
        if ranked:
            chosen = self._per_part(knowledge, question, ranked)
            if not chosen:
                best = ranked[0][0]
                chosen = [fact for score, fact in ranked[: self.max_facts] if score >= 0.6 * best]
            return self._with_definition(chosen, knowledge)
        if _RETURN_ASK.intersection(parsed.words) and not self._unanswered_topic(parsed, knowledge):
            # 'What should it return?': the human describes the result, final case first.
            returns = [f for f in knowledge.facts if f.kind == "return"]
            if returns:
                chosen = [returns[-1]] + sorted(returns[:-1], key=lambda f: (-f.volunteer, f.order))
                return self._with_definition(chosen[: min(2, self.max_facts)], knowledge)
        if self.volunteer and _GENERIC_REQUEST.search(question):
            untold = [f for f in knowledge.facts if f.volunteer >= 1.0
                      and f.text not in told and not (f.action and f.action in told)]
            untold.sort(key=lambda f: (-f.volunteer, f.order))
            if untold:
                return self._say(untold[: min(2, self.max_facts)], knowledge) or DONT_KNOW
        return DONT_KNOW

    @staticmethod
    def _unanswered_topic(parsed: Question, knowledge: Knowledge) -> bool:
        """Whether the question names something the code never mentions ('Should it be rounded?'
        of code that does not round): then describing the result would not answer it."""
        known = set(knowledge.idf)
        ignored = GENERIC_ASK | _RETURN_ASK | _RESULT_WORDS | knowledge.name_words
        return any(word not in known and word not in ignored and not word.isdigit() and len(word) > 2
                   for word in parsed.words)

    def _rank(self, knowledge: Knowledge, parsed: Question) -> list[tuple[float, Fact]]:
        """Facts that share a topic with the question, best first (ties: earlier in the code first)."""
        scored = []
        for fact in knowledge.facts:
            score, topical = score_fact(fact, parsed, knowledge)
            if topical and score >= self.min_score:
                scored.append((score, fact))
        scored.sort(key=lambda item: (-item[0], item[1].order))
        return scored

    def _per_part(self, knowledge: Knowledge, question: str,
                  ranked: list[tuple[float, Fact]]) -> list[Fact]:
        """Several questions in one message ('1. ...? 2. ...?') get one answer each, in their order."""
        parts = [p for p in _QUESTION_PARTS.split(question) if len(word_stems(p)) >= 2]
        if len(parts) < 2:
            return []
        chosen: list[Fact] = []
        earlier = ""
        for part in parts[:12]:
            # earlier questions are context: 'How many minutes?' follows 'Is the first half hour free?'
            before = ({id(fact): score for score, fact in self._rank(knowledge, read_question(earlier))}
                      if earlier else {})
            best = sorted(((score + 0.5 * before.get(id(fact), 0.0), fact)
                           for score, fact in self._rank(knowledge, read_question(part))),
                          key=lambda item: (-item[0], item[1].order))
            fresh = [(score, fact) for score, fact in best if fact not in chosen]
            if fresh and fresh[0][0] >= 0.8 * best[0][0]:  # a weaker runner-up is not this part's answer
                chosen.append(fresh[0][1])
            earlier += " " + part
        if len(chosen) < 2:
            return []
        return chosen[: self.max_facts]

    def _with_definition(self, chosen: list[Fact], knowledge: Knowledge) -> str:
        """Say the chosen facts, the first followed by the constant or update it relies on."""
        definition = definition_of(chosen[0], knowledge, chosen)
        if definition is not None and len(chosen) < self.max_facts:
            chosen = [chosen[0], definition, *chosen[1:]]
        return self._say(chosen[: self.max_facts], knowledge) or DONT_KNOW

    def _say(self, facts: Sequence[Fact], knowledge: Knowledge) -> str:
        facts = list(facts)
        while facts:
            reply = fit_reply(facts, self.max_chars)
            if not knowledge.guard.leaks(reply):
                return reply
            facts = facts[:-1]
        return ""
