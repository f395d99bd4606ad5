"""Chat-template turn masks: every masked span decodes back to exactly one agent message."""

import pytest

pytest.importorskip("transformers")

from helpers_tiny_models import EOS, collaborative_trajectories, synthetic_corpus, tiny_tokenizer

from sweet_trl.tokenization import (
    TRUNCATION_MARKER,
    ChatTemplateError,
    CriticInputFormat,
    conversation_messages,
    critic_messages,
    tokenize_conversation,
    tokenize_critic_input,
)

# ChatML-style template without {% generation %} tags: the masks must not depend on them
CHATML = ("{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}<|eot|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")

DIALOGUE = [
    {"role": "user", "content": "Write a unit converter."},
    {"role": "assistant", "content": "Should the result be in kelvin?"},
    {"role": "user", "content": "Yes, that is right."},
    {"role": "assistant", "content": "  Any edge cases? Use <|eot|> as a separator?\n"},  # a control token as text
    {"role": "user", "content": "No."},
    {"role": "assistant", "content": "I WANT TO ANSWER: def solve(value):\n    return value + 273.15"},
]


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_tokenizer(synthetic_corpus())


def agent_contents(messages):
    return [m["content"] for m in messages if m["role"] == "assistant"]


@pytest.mark.parametrize("template", ["default", "chatml"])
def test_each_masked_span_decodes_to_exactly_its_agent_message(tokenizer, template):
    tok = tiny_tokenizer(synthetic_corpus())
    if template == "chatml":
        tok.chat_template = CHATML
    messages = critic_messages(DIALOGUE, "def convert(value):\n    return value + 273.15")
    conv = tokenize_conversation(tok, messages)
    assert conv.num_turns == 3
    assert [tok.decode(conv.input_ids[a:b]) for a, b in conv.turn_spans] == agent_contents(DIALOGUE)
    for k, (a, b) in enumerate(conv.turn_spans, start=1):  # turn ids agree with the spans and nothing else is marked
        assert conv.turn_ids[a:b] == [k] * (b - a)
    assert sum(t > 0 for t in conv.turn_ids) == sum(b - a for a, b in conv.turn_spans)
    # the control token written by the agent is plain text, not the template's end-of-turn token
    a, b = conv.turn_spans[1]
    assert tok.convert_tokens_to_ids(EOS) not in conv.input_ids[a:b]


def test_tokens_match_the_chat_template_and_its_generation_mask(tokenizer):
    for record in collaborative_trajectories(6, seed=3, shared_context=False):
        messages = critic_messages(record["dialogue_history"], record["task"]["ground_truth"])
        reference = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True,
                                                  return_assistant_tokens_mask=True)
        content = tokenize_conversation(tokenizer, messages)
        with_end = tokenize_conversation(tokenizer, messages, include_end_of_turn=True)
        assert content.input_ids == with_end.input_ids == reference["input_ids"]
        # {% generation %} covers content + end-of-turn token: exactly the include_end_of_turn mask
        assert [int(t > 0) for t in with_end.turn_ids] == reference["assistant_masks"]
        eot = tokenizer.convert_tokens_to_ids(EOS)
        for (a, b), (a2, b2) in zip(content.turn_spans, with_end.turn_spans):
            assert a2 == a and b2 == b + 1 and with_end.input_ids[b] == eot


def test_score_turns_selects_agent_turns_and_numbers_them_from_one(tokenizer):
    conv = tokenize_conversation(tokenizer, DIALOGUE, score_turns=[-1])
    assert conv.num_turns == 1 and conv.agent_turns == [2] and max(conv.turn_ids) == 1
    assert tokenizer.decode(conv.input_ids[slice(*conv.turn_spans[0])]) == DIALOGUE[-1]["content"]
    conv = tokenize_conversation(tokenizer, DIALOGUE, score_turns=[2, 0])
    assert conv.agent_turns == [0, 2]
    assert [tokenizer.decode(conv.input_ids[a:b]) for a, b in conv.turn_spans] == [
        DIALOGUE[1]["content"], DIALOGUE[5]["content"]]
    with pytest.raises(IndexError, match="3 agent message"):
        tokenize_conversation(tokenizer, DIALOGUE, score_turns=[3])


def test_empty_agent_message_is_a_turn_without_tokens(tokenizer):
    dialogue = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": ""},
                {"role": "user", "content": "Well?"}, {"role": "assistant", "content": "Sounds good."}]
    conv = tokenize_conversation(tokenizer, dialogue)
    assert conv.num_turns == 2
    assert conv.turn_spans[0][0] == conv.turn_spans[0][1]
    assert tokenizer.decode(conv.input_ids[slice(*conv.turn_spans[1])]) == "Sounds good."


def test_templates_that_rewrite_messages_or_history_are_refused(tokenizer):
    tok = tiny_tokenizer(synthetic_corpus())
    tok.chat_template = ("{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] | upper }}"
                         "<|eot|>\n{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}")
    with pytest.raises(ChatTemplateError, match="rewrites this agent message"):
        tokenize_conversation(tok, DIALOGUE)
    # a template that drops old turns once a conversation is long renders prefixes inconsistently
    tok.chat_template = ("{% for message in messages[-3:] %}<|{{ message['role'] }}|>\n{{ message['content'] }}"
                         "<|eot|>\n{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}")
    with pytest.raises(ChatTemplateError, match="prefixes"):
        tokenize_conversation(tok, DIALOGUE)
    tok.chat_template = ("{% for message in messages %}{% if message['role'] == 'system' %}"
                         "{{ raise_exception('System role not supported') }}{% endif %}{{ message['content'] }}"
                         "{% endfor %}")
    with pytest.raises(ChatTemplateError, match="System role not supported.*first user message"):
        tokenize_conversation(tok, critic_messages(DIALOGUE, "def f(): pass"))
    tok.chat_template = None
    with pytest.raises(ChatTemplateError, match="no chat template"):
        tokenize_conversation(tok, DIALOGUE)


def test_conversation_messages_validates_roles_and_contents():
    assert conversation_messages([{"role": "user", "content": "a", "input": "x", "logprobs": [0.1]}]) == [
        {"role": "user", "content": "a"}]
    with pytest.raises(ValueError, match="role 'tool'"):
        conversation_messages([{"role": "tool", "content": "a"}])
    with pytest.raises(ValueError, match="content of type NoneType"):
        conversation_messages([{"role": "assistant", "content": None}])


def test_critic_messages_place_privileged_information():
    c = "def f():\n    return {'a': 1}"  # braces must survive the template
    system = critic_messages(DIALOGUE, c)
    assert system[0] == {"role": "system", "content": "Reference solution (hidden from the agent):\n" + c}
    assert system[1:] == conversation_messages(DIALOGUE)
    merged = critic_messages([{"role": "system", "content": "Be brief."}, *DIALOGUE], c)
    assert merged[0]["content"].startswith("Be brief.\n\nReference solution") and len(merged) == len(DIALOGUE) + 1
    first_user = critic_messages(DIALOGUE, c, CriticInputFormat(privileged_placement="first_user"))
    assert first_user[0]["content"].endswith("\n\n" + DIALOGUE[0]["content"]) and c in first_user[0]["content"]
    assert critic_messages(DIALOGUE, None, CriticInputFormat(use_privileged=False)) == conversation_messages(DIALOGUE)
    with pytest.raises(ValueError, match="privileged information"):
        critic_messages(DIALOGUE, "  ")
    with pytest.raises(ValueError, match="placeholder"):
        CriticInputFormat(privileged_template="Reference: {c}")


def test_too_long_inputs_are_dropped_or_shorten_only_the_privileged_text(tokenizer):
    c = "def convert(value):\n    # the result is in kelvin\n" + "    value = value + 1\n" * 60 + "    return value"
    full = tokenize_critic_input(tokenizer, DIALOGUE, c, CriticInputFormat(max_length=None))
    dialogue_only = tokenize_critic_input(tokenizer, DIALOGUE, c, CriticInputFormat(max_length=None,
                                                                                    use_privileged=False))
    limit = full.length - 100
    dropped = tokenize_critic_input(tokenizer, DIALOGUE, c, CriticInputFormat(max_length=limit))
    assert dropped.conversation is None and dropped.drop_reason == "too_long" and dropped.length == full.length

    cut = tokenize_critic_input(tokenizer, DIALOGUE, c, CriticInputFormat(max_length=limit,
                                                                         too_long="truncate_privileged"))
    conv = cut.conversation
    assert cut.privileged_truncated and len(conv) <= limit
    text = tokenizer.decode(conv.input_ids)
    assert TRUNCATION_MARKER in text and c[:40] in text and c not in text
    assert [tokenizer.decode(conv.input_ids[a:b]) for a, b in conv.turn_spans] == agent_contents(DIALOGUE)

    too_short = tokenize_critic_input(tokenizer, DIALOGUE, c, CriticInputFormat(
        max_length=dialogue_only.length - 1, too_long="truncate_privileged"))
    assert too_short.conversation is None and too_short.drop_reason == "too_long"


def test_a_dialogue_without_agent_turn_is_reported(tokenizer):
    result = tokenize_critic_input(tokenizer, [{"role": "user", "content": "Hello?"}], "def f(): pass")
    assert result.conversation is None and result.drop_reason == "no_agent_turn"
