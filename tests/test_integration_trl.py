"""TRL's GRPOTrainer trains on ColBench through both doors: environment_factory (tools) and rollout_func.

The model is a tiny Qwen2 with TRL's Qwen2.5 chat template (so TRL parses its tool calls), taught in the test to
play scripted dialogues: ask the human one question, then answer. Everything else is real: TRL's generation and
tool loop, the offline simulated human, the sandboxed grader, two optimizer steps.
"""

from __future__ import annotations

import json
import os
import sys

import pytest

pytest.importorskip("trl")
pytest.importorskip("transformers")
torch = pytest.importorskip("torch")
pytestmark = pytest.mark.usefixtures("one_torch_thread")

from helpers_trl import human_suffix_ids, overfit, qwen_tokenizer, render_ids, tiny_qwen, tool_suffix_ids

from colbench_gym.envs.dialogue import ANSWER_MARKER
from colbench_gym.tasks import resolve_tasks

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

QUESTION = "What should the function return?"
RIGHT, WRONG = "b-016-curve-scores", "b-015-taxi-fare"
WRONG_ANSWER = "def taxi_fare(distance_km, minutes, night=False):\n    return 8.0"
THANKS = "Thank you."


@pytest.fixture(scope="module")
def tasks():
    by_id = {task.task_id: task for task in resolve_tasks("train", "backend")}
    return [by_id[RIGHT], by_id[WRONG]]


def _answers(tasks):
    return {RIGHT: tasks[0].ground_truth.strip(), WRONG: WRONG_ANSWER}


def _call(name, arguments):
    payload = json.dumps({"name": name, "arguments": arguments})
    return f"<tool_call>\n{payload}\n</tool_call><|im_end|>"


@pytest.fixture(scope="module")
def scripted(tasks):
    """A tokenizer and the weights of a tiny Qwen2 that plays both doors' scripted dialogues (trained once)."""
    from colbench_gym.integrations.trl import make_environment_factory, make_rollout_dataset

    answers = _answers(tasks)
    tool_env = make_environment_factory("ColBench-Backend-v0", tasks=tasks, max_turns=3)()
    tool_script, corpus = [], [QUESTION, THANKS, json.dumps({"question": QUESTION})]
    for task in tasks:
        request = tool_env.reset(task_id=task.task_id)
        reply = tool_env.ask_human(QUESTION)
        confirmation = tool_env.submit_answer(answers[task.task_id])
        tool_script.append((task.task_id, request, reply, confirmation))
        corpus += [request, reply, confirmation, answers[task.task_id], json.dumps({"code": answers[task.task_id]})]
    plain = make_rollout_dataset("ColBench-Backend-v0", tasks=tasks, max_turns=3)
    for row in plain:
        corpus += [m["content"] for m in row["prompt"]]
    tokenizer = qwen_tokenizer(corpus, vocab_size=4096)
    tools = [tool_env.ask_human, tool_env.submit_answer]

    sequences, replies = [], {}
    for task_id, request, reply, confirmation in tool_script:
        ids = render_ids(tokenizer, [{"role": "user", "content": request}], True, tools=tools)
        mask = [0] * len(ids)
        for piece, is_policy in (
                (tokenizer(_call("ask_human", {"question": QUESTION}), add_special_tokens=False)["input_ids"], 1),
                (tool_suffix_ids(tokenizer, "ask_human", reply), 0),
                (tokenizer(_call("submit_answer", {"code": answers[task_id]}), add_special_tokens=False)["input_ids"], 1),
                (tool_suffix_ids(tokenizer, "submit_answer", confirmation), 0),
                (tokenizer(THANKS + "<|im_end|>", add_special_tokens=False)["input_ids"], 1)):
            ids, mask = ids + piece, mask + [is_policy] * len(piece)
        sequences.append((ids, mask))
        replies[task_id] = reply

    env = make_environment_factory("ColBench-Backend-v0", tasks=tasks, max_turns=3)().env
    for row in plain:
        task_id = row["task_id"]
        _, info = env.reset(options={"task_id": task_id})
        _, _, _, _, info = env.step(QUESTION)
        ids = render_ids(tokenizer, [{"role": m["role"], "content": m["content"]} for m in row["prompt"]], True)
        mask = [0] * len(ids)
        for piece, is_policy in (
                (tokenizer(QUESTION + "<|im_end|>", add_special_tokens=False)["input_ids"], 1),
                (human_suffix_ids(tokenizer, info["messages"][-1]["content"]), 0),
                (tokenizer(f"{ANSWER_MARKER}\n{answers[task_id]}<|im_end|>", add_special_tokens=False)["input_ids"], 1)):
            ids, mask = ids + piece, mask + [is_policy] * len(piece)
        sequences.append((ids, mask))

    model = tiny_qwen(tokenizer, hidden_size=64)
    loss = overfit(model, sequences, steps=400, lr=3e-3, target_loss=0.02)
    assert loss < 0.1, loss
    return {"tokenizer": tokenizer, "state": {k: v.clone() for k, v in model.state_dict().items()},
            "replies": replies}


def _model(scripted):
    model = tiny_qwen(scripted["tokenizer"], hidden_size=64)
    model.load_state_dict(scripted["state"])
    return model


def _recording_trainer(**kwargs):
    from trl import GRPOTrainer

    class Recording(GRPOTrainer):
        recorded: list = []

        def _generate_and_score_completions(self, inputs):
            output = super()._generate_and_score_completions(inputs)
            self.recorded.append({k: v.detach().cpu() if hasattr(v, "detach") else v for k, v in output.items()})
            return output

    Recording.recorded = []
    return Recording(**kwargs)


def _config(tmp_path, **overrides):
    from trl import GRPOConfig

    settings = dict(output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=2, max_steps=2,
                    learning_rate=1e-5, logging_steps=1, report_to="none", save_strategy="no", use_cpu=True,
                    bf16=False, gradient_checkpointing=False, temperature=0.3, max_completion_length=384,
                    seed=0, dataloader_num_workers=0)
    settings.update(overrides)
    return GRPOConfig(**settings)


def _split(ids, keep):
    return [int(t) for t, k in zip(ids.tolist(), keep.tolist()) if k]


# -- door 1: environment_factory -----------------------------------------------------------------------------------

def test_tool_environment_plays_an_episode_and_guards_its_end(tasks):
    from colbench_gym.integrations.trl import make_environment_factory

    Env = make_environment_factory("ColBench-Backend-v0", tasks=tasks, max_turns=3)
    assert Env.__name__ == "ColBenchBackend"
    public = sorted(name for name in dir(Env) if callable(getattr(Env, name)) and not name.startswith("_"))
    assert public == ["ask_human", "get_reward", "reset", "submit_answer"]  # what TRL turns into tools (+ 2)
    env = Env()
    text = env.reset(task_id=RIGHT, prompt=[{"role": "user", "content": ""}], other_column=3)
    assert text.endswith(tasks[0].problem_description) and "ask_human" in text and "submit_answer" in text
    assert env.get_reward() == 0.0  # the rollout stopped before an answer: scored as out of turns
    env.reset(task_id=RIGHT)
    reply = env.ask_human(QUESTION)
    assert reply and tasks[0].ground_truth not in reply
    with pytest.raises(ValueError, match="submit"):
        env.ask_human(f"{ANSWER_MARKER} def f(): pass")
    assert env.submit_answer(tasks[0].ground_truth) == "Your answer was submitted. The episode is over."
    assert env.get_reward() == 1.0 and env.done and env.info["success"]
    steps = env.env.unwrapped.turn
    with pytest.raises(RuntimeError, match="episode is over"):
        env.ask_human("one more question?")
    with pytest.raises(RuntimeError, match="episode is over"):
        env.submit_answer("def f(): pass")
    assert env.env.unwrapped.turn == steps  # a finished env is never stepped
    assert "privileged" not in env.info

    env.reset(task_index=1)
    for _ in range(2):
        env.ask_human("Anything else?")
    assert "limit of 3 turns" in env.ask_human("And?")
    assert env.get_reward() == 0.0 and env.info["outcome"] == "no_answer"


def test_grpo_environment_factory_trains_two_steps(scripted, tasks, tmp_path):
    from colbench_gym.integrations.trl import make_environment_dataset, make_environment_factory

    Env = make_environment_factory("ColBench-Backend-v0", tasks=tasks, max_turns=3, instructions=True)
    made = []

    def factory():
        made.append(Env())
        return made[-1]

    tokenizer = scripted["tokenizer"]
    trainer = _recording_trainer(
        model=_model(scripted), processing_class=tokenizer,
        args=_config(tmp_path, max_tool_calling_iterations=3),
        train_dataset=make_environment_dataset("ColBench-Backend-v0", tasks=tasks, repeats=4),
        environment_factory=factory)
    trainer.train()

    assert trainer.state.global_step == 2
    logged = [entry for entry in trainer.state.log_history if "rewards/ColBenchBackend/mean" in entry]
    assert len(logged) == 2
    assert any(entry["rewards/ColBenchBackend/mean"] > 0 for entry in logged)
    assert all(entry["tools/call_frequency"] > 0 for entry in logged)

    assert {env.get_reward() for env in made if env.done} <= {0.0, 0.2, 1.0}  # the two scripted answers' scores
    replies = [scripted["replies"][RIGHT], scripted["replies"][WRONG]]
    saw_reply = False
    for output in trainer.recorded:
        keep = output["completion_mask"].bool()
        for ids, completion, tool in zip(output["completion_ids"], keep, output["tool_mask"].bool()):
            policy = tokenizer.decode(_split(ids, completion & tool))
            environment = tokenizer.decode(_split(ids, completion & ~tool))
            assert "<tool_call>" in policy and "<tool_response>" not in policy
            assert not any(reply in policy for reply in replies)
            assert "<tool_call>" not in environment
            saw_reply |= any(reply in environment for reply in replies)
            for task in tasks:  # the hidden reference never reaches the model, except a correct answer it wrote
                assert task.ground_truth.strip() not in environment
    assert saw_reply


# -- door 2: rollout_func --------------------------------------------------------------------------------------

def test_rollout_dataset_carries_the_task(tasks):
    from colbench_gym.integrations.trl import make_rollout_dataset, make_rollout_func

    data = make_rollout_dataset("ColBench-Backend-v0", tasks=tasks, repeats=2)
    assert data["task_id"] == [RIGHT, WRONG, RIGHT, WRONG]
    rollout = make_rollout_func("ColBench-Backend-v0", tasks=tasks)
    prompt = data[1]["prompt"]
    assert rollout.task_id_of(prompt) == WRONG
    assert rollout.task_id_of([{k: v for k, v in m.items() if k != "task_id"} for m in prompt]) == WRONG
    with pytest.raises(ValueError, match="matches no task"):
        rollout.task_id_of([{"role": "user", "content": "something else"}])


def test_grpo_rollout_func_trains_two_steps_with_the_human_masked(scripted, tasks, tmp_path):
    from colbench_gym.integrations.trl import colbench_reward, make_rollout_dataset, make_rollout_func

    tokenizer = scripted["tokenizer"]
    rollout = make_rollout_func("ColBench-Backend-v0", max_turns=3, max_turn_tokens=160, tasks=tasks)
    seen = []

    def spy(prompts, trainer):
        output = rollout(prompts, trainer)
        seen.append((len(prompts), output, list(rollout.last_episodes)))
        return output

    trainer = _recording_trainer(
        model=_model(scripted), processing_class=tokenizer, args=_config(tmp_path), reward_funcs=colbench_reward,
        train_dataset=make_rollout_dataset("ColBench-Backend-v0", tasks=tasks, max_turns=3, repeats=4),
        rollout_func=spy)
    trainer.train()

    assert trainer.state.global_step == 2
    logged = [entry for entry in trainer.state.log_history if "rewards/colbench_reward/mean" in entry]
    assert len(logged) == 2 and any(entry["rewards/colbench_reward/mean"] > 0 for entry in logged)
    assert [n for n, _, _ in seen] == [4, 4]  # each prompt already repeated num_generations times

    answered = 0
    for _, output, episodes in seen:
        for k, episode in enumerate(episodes):
            ids, mask = output["completion_ids"][k], output["env_mask"][k]
            assert len(ids) == len(mask) <= 384
            policy = tokenizer.decode([t for t, m in zip(ids, mask) if m])
            human = tokenizer.decode([t for t, m in zip(ids, mask) if not m])
            messages = episode.messages
            agent = [m["content"] for m in messages if m["role"] == "assistant"]
            said = [m["content"] for m in messages[2:] if m["role"] == "user"]
            # the env_mask=1 tokens are exactly the policy's messages (and their end-of-turn tokens)
            assert policy.replace("<|im_end|>", "") == "".join(agent)
            for reply in said[: len(agent) - 1]:
                assert reply in human and reply not in policy
            spans = output["turn_spans"][k]
            assert len(spans) == len(agent)
            for (start, end), text in zip(spans, agent):
                assert all(mask[start:end]) and tokenizer.decode(ids[start:end], skip_special_tokens=True) == text
            assert output["colbench_reward"][k] == episode.reward
            answered += episode.outcome == "answered"
    assert answered > 0

    for output in trainer.recorded:  # what the trainer trained on: the human's tokens are out of the loss
        for ids, completion, tool in zip(output["completion_ids"], output["completion_mask"].bool(),
                                         output["tool_mask"].bool()):
            assert not any(reply in tokenizer.decode(_split(ids, completion & tool))
                           for reply in scripted["replies"].values())


def test_missing_trl_names_the_extra(monkeypatch):
    from colbench_gym._optional import MissingExtraError
    from colbench_gym.integrations import trl as integration

    monkeypatch.setitem(sys.modules, "trl", None)
    with pytest.raises(MissingExtraError, match=r"colbench-gym\[trl\]"):
        integration.make_environment_factory("ColBench-Backend-v0")
    with pytest.raises(MissingExtraError, match=r"colbench-gym\[trl\]"):
        integration.make_rollout_func("ColBench-Backend-v0")


@pytest.mark.browser
def test_frontend_tools_show_pages_and_submit_html():
    from colbench_gym.integrations.trl import make_environment_factory

    Env = make_environment_factory("ColBench-Frontend-v0", tasks="train", similarity="ssim", max_turns=3)
    assert Env.__name__ == "ColBenchFrontend"
    assert sorted(n for n in dir(Env) if callable(getattr(Env, n)) and not n.startswith("_")) == [
        "ask_human", "get_reward", "reset", "submit_html"]
    env = Env()
    text = env.reset(task_index=0)
    assert "submit_html" in text and env.env.unwrapped.task.ground_truth not in text
    reply = env.ask_human("Is this close? <html><body><h1>Hello</h1></body></html>")
    assert reply and env.info["render"]["status"] == "ok"
    assert env.submit_html("<html><body><h1>Hello</h1><p>World</p></body></html>").startswith("Your answer")
    reward = env.get_reward()
    assert 0.0 < reward < 1.0 and env.info["similarity_metric"] == "ssim", env.info  # a failed render says why
