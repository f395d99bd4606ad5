"""Chat-template tokenisation with exact per-turn masks (shared by the critic and the policy trainers).

A conversation is rendered with the tokenizer's own chat template, then cut at the boundaries of each agent
message: template text, agent content, end of turn, template text, ... Each piece is tokenised on its own, so every
agent message maps to a contiguous run of tokens that decodes back to exactly that message (the way a policy
produced it: prompt tokens, then generated tokens), and control tokens written inside a message are encoded as
plain text. ``turn_ids`` numbers those runs ``1..T``; everything else is ``0``.

Turn boundaries come from rendering conversation prefixes (``messages[:i]`` with the generation prompt, then
``messages[:i + 1]``), so any template works without ``{% generation %}`` tags, provided it renders a prefix of a
conversation as a prefix of the whole (a clear :class:`ChatTemplateError` says when it does not).

    >>> conv = tokenize_conversation(tokenizer, messages)               # every agent turn scored
    >>> conv.turn_spans[0]                                               # (start, end) token span of agent turn 1
    >>> tokenizer.decode(conv.input_ids[slice(*conv.turn_spans[0])])     # == messages[<first agent>]["content"]

The critic's input adds the training-time information ``c`` (the task's ground truth) before the dialogue, see
:class:`CriticInputFormat` and :func:`tokenize_critic_input`. This module needs no torch.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

logger = logging.getLogger(__name__)

DEFAULT_PRIVILEGED_TEMPLATE = "Reference solution (hidden from the agent):\n{privileged}"
TRUNCATION_MARKER = "\n[... truncated]"
_ROLES = ("system", "user", "assistant")
_warned_mismatch = False


class ChatTemplateError(ValueError):
    """The chat template cannot give exact turn boundaries for this conversation (the message says why)."""


@dataclass(frozen=True)
class TokenizedConversation:
    """Token ids of a rendered conversation and which agent turn each token belongs to.

    Attributes:
        input_ids: token ids of the whole rendered conversation.
        turn_ids: same length; ``k >= 1`` for the tokens of the ``k``-th scored agent turn, ``0`` elsewhere.
        turn_spans: ``(start, end)`` token span of each scored turn, in order (``start == end`` for an empty message).
        agent_turns: index among the conversation's agent messages (0-based) of each scored turn.
    """

    input_ids: list[int]
    turn_ids: list[int]
    turn_spans: list[tuple[int, int]]
    agent_turns: list[int]

    @property
    def num_turns(self) -> int:
        return len(self.turn_spans)

    def __len__(self) -> int:
        return len(self.input_ids)


def conversation_messages(dialogue: Iterable[Mapping[str, Any]]) -> list[dict[str, str]]:
    """``{"role", "content"}`` messages from a dialogue history (extra keys such as token ids are dropped)."""
    messages = []
    for index, message in enumerate(dialogue):
        if not isinstance(message, Mapping):
            raise ValueError(f"message {index} is a {type(message).__name__}, expected a mapping with role/content")
        role, content = message.get("role"), message.get("content")
        if role not in _ROLES:
            raise ValueError(f"message {index} has role {role!r}; expected one of {_ROLES}")
        if not isinstance(content, str):
            raise ValueError(f"message {index} ({role}) has content of type {type(content).__name__}, expected str")
        messages.append({"role": role, "content": content})
    return messages


def render(tokenizer: Any, messages: Sequence[Mapping[str, str]], add_generation_prompt: bool = False,
           **chat_template_kwargs: Any) -> str:
    """The conversation as text, exactly as the tokenizer's chat template writes it."""
    if getattr(tokenizer, "chat_template", None) is None:
        raise ChatTemplateError(f"{type(tokenizer).__name__} has no chat template; set tokenizer.chat_template")
    try:
        return tokenizer.apply_chat_template(
            list(messages), tokenize=False, add_generation_prompt=add_generation_prompt, **chat_template_kwargs
        )
    except Exception as err:  # jinja errors, including the template's own raise_exception()
        roles = [m.get("role") for m in messages]
        raise ChatTemplateError(f"the chat template cannot render roles {roles}: {err} (for a template without a "
                                "system role, put the privileged information in the first user message)") from err


def _encode(tokenizer: Any, text: str, as_plain_text: bool = False) -> list[int]:
    if not text:
        return []
    return tokenizer.encode(text, add_special_tokens=False, split_special_tokens=as_plain_text)


def _locate_content(full: str, start: int, end: int, content: str, where: str) -> tuple[int, int]:
    """Character span of an agent message's content inside its rendered region ``full[start:end]``."""
    region = full[start:end]
    for candidate in (content, content.strip()):
        offset = region.find(candidate)
        if offset >= 0 and (candidate or not content):
            return start + offset, start + offset + len(candidate)
    raise ChatTemplateError(
        f"{where}: the chat template rewrites this agent message (its text is not in the rendered turn), "
        f"so its tokens cannot be located; rendered turn: {region[:200]!r}"
    )


def tokenize_conversation(
    tokenizer: Any,
    messages: Sequence[Mapping[str, str]],
    *,
    agent_role: str = "assistant",
    score_turns: Iterable[int] | None = None,
    include_end_of_turn: bool = False,
    chat_template_kwargs: Mapping[str, Any] | None = None,
) -> TokenizedConversation:
    """Tokenise ``messages`` with the chat template and mark the tokens of each agent turn.

    Args:
        tokenizer: a tokenizer with a chat template.
        messages: ``{"role", "content"}`` messages; agent messages have role ``agent_role``.
        score_turns: 0-based indices among the agent messages to mark (default: all; negative indices count from
            the end, so ``[-1]`` marks only the last agent message, e.g. a candidate action).
        include_end_of_turn: also mark the end-of-turn token the template writes after an agent message (up to and
            including its first special token), as a policy must learn to generate it; the critic scores content only.
        chat_template_kwargs: extra variables for the template.

    Raises:
        ChatTemplateError: the template does not render prefixes consistently or rewrites agent messages.
    """
    messages = conversation_messages(messages)
    kwargs = dict(chat_template_kwargs or {})
    full = render(tokenizer, messages, **kwargs)
    agent_positions = [i for i, m in enumerate(messages) if m["role"] == agent_role]
    scored = _normalise_turns(score_turns, len(agent_positions))
    special_ids = set(tokenizer.all_special_ids)

    input_ids: list[int] = []
    turn_ids: list[int] = []
    turn_spans: list[tuple[int, int]] = []

    def emit(ids: list[int], turn: int = 0) -> None:
        input_ids.extend(ids)
        turn_ids.extend([turn] * len(ids))

    cursor = 0
    for agent_index, position in enumerate(agent_positions):
        where = f"agent message {agent_index} (message {position})"
        prefix = render(tokenizer, messages[:position], add_generation_prompt=True, **kwargs)
        through = render(tokenizer, messages[: position + 1], **kwargs)
        if not (full.startswith(prefix) and full.startswith(through) and cursor <= len(prefix) <= len(through)):
            raise ChatTemplateError(
                f"{where}: the chat template does not render this conversation's prefixes as prefixes of the whole "
                "conversation, so turn boundaries are ambiguous (templates that drop or rewrite earlier turns, such "
                "as reasoning-stripping ones, cannot be used for multi-turn training)"
            )
        start, end = _locate_content(full, len(prefix), len(through), messages[position]["content"], where)
        turn = scored.index(agent_index) + 1 if agent_index in scored else 0
        emit(_encode(tokenizer, full[cursor:start]))
        span_start = len(input_ids)
        emit(_encode(tokenizer, full[start:end], as_plain_text=True), turn)
        suffix = _encode(tokenizer, full[end: len(through)])
        marked = 0
        if include_end_of_turn and turn:
            marked = next((j + 1 for j, token in enumerate(suffix) if token in special_ids), 0)
        emit(suffix[:marked], turn)
        if turn:
            turn_spans.append((span_start, len(input_ids)))
        emit(suffix[marked:])
        cursor = len(through)
    emit(_encode(tokenizer, full[cursor:]))
    _check_against_whole_text(tokenizer, full, input_ids)
    return TokenizedConversation(input_ids, turn_ids, turn_spans, scored)


def _normalise_turns(score_turns: Iterable[int] | None, count: int) -> list[int]:
    if score_turns is None:
        return list(range(count))
    turns = set()
    for turn in score_turns:
        if not -count <= turn < count:
            raise IndexError(f"score_turns has {turn} but the conversation has {count} agent message(s)")
        turns.add(turn % count)
    return sorted(turns)


def _check_against_whole_text(tokenizer: Any, full: str, input_ids: list[int]) -> None:
    """Warn once when piecewise tokenisation differs from tokenising the whole text (merges across a boundary)."""
    global _warned_mismatch
    if _warned_mismatch:
        return
    whole = _encode(tokenizer, full)
    if whole != input_ids:
        _warned_mismatch = True
        logger.warning(
            "Tokenising agent messages apart from the template text gives %d tokens where the whole text gives %d "
            "(the tokenizer merges across a turn boundary). Turn masks stay exact; the sequences differ slightly "
            "from tokenising the rendered text in one go. This is shown once.", len(input_ids), len(whole)
        )


# ---------------------------------------------------------------------------------------------------------------
# The critic's input: privileged information c, then the dialogue.

@dataclass
class CriticInputFormat:
    """How the critic reads a trajectory: ``c`` first (unless ``use_privileged=False``), then the dialogue.

    Attributes:
        privileged_template: text that introduces ``c``; ``{privileged}`` is replaced by it.
        privileged_placement: ``"system"`` puts that text in a system message before the dialogue (merged into an
            existing leading system message); ``"first_user"`` prepends it to the first human message, for chat
            templates without a system role.
        use_privileged: ``False`` gives the critic the dialogue alone (the ablation without asymmetric information).
        include_end_of_turn: also score the end-of-turn token of each agent message.
        agent_role: role of the agent's messages.
        max_length: longest tokenised input.
        too_long: what to do with a longer input: ``"drop"`` (the default; counted and logged by callers) or
            ``"truncate_privileged"`` (shorten ``c`` until the input fits, marking the cut; the dialogue and turn
            masks are never cut; dropped when the dialogue alone does not fit).
    """

    privileged_template: str = DEFAULT_PRIVILEGED_TEMPLATE
    privileged_placement: Literal["system", "first_user"] = "system"
    use_privileged: bool = True
    include_end_of_turn: bool = False
    agent_role: str = "assistant"
    max_length: int | None = 8192
    too_long: Literal["drop", "truncate_privileged"] = "drop"

    def __post_init__(self) -> None:
        if "{privileged}" not in self.privileged_template:
            raise ValueError("privileged_template must contain the placeholder '{privileged}'")
        if self.privileged_placement not in ("system", "first_user"):
            raise ValueError(
                f"privileged_placement must be 'system' or 'first_user', not {self.privileged_placement!r}")
        if self.too_long not in ("drop", "truncate_privileged"):
            raise ValueError(f"too_long must be 'drop' or 'truncate_privileged', not {self.too_long!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> CriticInputFormat:
        known = cls.__dataclass_fields__
        return cls(**{k: v for k, v in values.items() if k in known})


def critic_messages(dialogue: Iterable[Mapping[str, Any]], privileged: str | None,
                    fmt: CriticInputFormat | None = None) -> list[dict[str, str]]:
    """The critic's view of a dialogue: the privileged text placed per ``fmt``, then the messages."""
    fmt = fmt or CriticInputFormat()
    messages = conversation_messages(dialogue)
    if not fmt.use_privileged:
        return messages
    if not isinstance(privileged, str) or not privileged.strip():
        raise ValueError("the critic needs the privileged information c (a non-empty string), got "
                         f"{type(privileged).__name__}; set use_privileged=False to train without it")
    block = fmt.privileged_template.replace("{privileged}", privileged)
    if fmt.privileged_placement == "system":
        if messages and messages[0]["role"] == "system":
            return [{"role": "system", "content": messages[0]["content"] + "\n\n" + block}, *messages[1:]]
        return [{"role": "system", "content": block}, *messages]
    first_user = next((i for i, m in enumerate(messages) if m["role"] == "user"), None)
    if first_user is None:
        return [{"role": "user", "content": block}, *messages]
    messages[first_user] = {"role": "user", "content": block + "\n\n" + messages[first_user]["content"]}
    return messages


@dataclass
class CriticInput:
    """Result of :func:`tokenize_critic_input`: a conversation, or why there is none."""

    conversation: TokenizedConversation | None
    drop_reason: str | None = None  # "too_long" | "no_agent_turn" | "no_scored_token"
    privileged_truncated: bool = False
    length: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def tokenize_critic_input(
    tokenizer: Any,
    dialogue: Iterable[Mapping[str, Any]],
    privileged: str | None,
    fmt: CriticInputFormat | None = None,
    score_turns: Iterable[int] | None = None,
) -> CriticInput:
    """Tokenise what the critic reads for one trajectory, applying ``fmt.max_length`` and ``fmt.too_long``.

    Never truncates the dialogue: an input that cannot fit is returned with ``drop_reason="too_long"``.
    """
    fmt = fmt or CriticInputFormat()
    dialogue = conversation_messages(dialogue)
    if not any(m["role"] == fmt.agent_role for m in dialogue):
        return CriticInput(None, "no_agent_turn")

    def encode(c: str | None) -> TokenizedConversation:
        return tokenize_conversation(tokenizer, critic_messages(dialogue, c, fmt), agent_role=fmt.agent_role,
                                     score_turns=score_turns, include_end_of_turn=fmt.include_end_of_turn)

    conversation = encode(privileged)
    length = len(conversation)
    if not any(conversation.turn_ids):
        return CriticInput(None, "no_scored_token", length=length)
    if fmt.max_length is None or length <= fmt.max_length:
        return CriticInput(conversation, length=length)
    if fmt.too_long == "truncate_privileged" and fmt.use_privileged:
        privileged_ids = _encode(tokenizer, privileged or "")
        keep = len(privileged_ids) - (length - fmt.max_length) - len(_encode(tokenizer, TRUNCATION_MARKER))
        for _ in range(4):  # re-tokenising the cut text can shift the count by a few tokens
            if keep <= 0:
                break
            cut = tokenizer.decode(privileged_ids[:keep]) + TRUNCATION_MARKER
            conversation = encode(cut)
            if len(conversation) <= fmt.max_length:
                return CriticInput(conversation, privileged_truncated=True, length=length)
            keep -= len(conversation) - fmt.max_length
    return CriticInput(None, "too_long", length=length)
