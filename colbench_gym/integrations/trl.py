"""ColBench inside TRL's ``GRPOTrainer``: two doors, one environment (``pip install 'colbench-gym[trl]'``).

**As tools** (``environment_factory``): the dialogue becomes tool calls, which TRL runs itself, with vLLM or
transformers, the tool results masked out of the loss::

    from trl import GRPOConfig, GRPOTrainer
    from colbench_gym.integrations.trl import make_environment_dataset, make_environment_factory

    trainer = GRPOTrainer(model="Qwen/Qwen3-0.6B", args=GRPOConfig(..., max_tool_calling_iterations=10),
                          train_dataset=make_environment_dataset("ColBench-Backend-v0", tasks="train"),
                          environment_factory=make_environment_factory("ColBench-Backend-v0", tasks="train"))

The environment's tools are ``ask_human(question)`` and ``submit_answer(code)`` (frontend: ``submit_html(html)``);
``reset`` returns the instructions and the human's request, which TRL appends to the last user message; the
episode's score is ``get_reward()``, logged by TRL under the class name (``ColBenchBackend``). TRL ends a rollout at
the first assistant turn without a tool call; a rollout that stops before submitting is scored as ColBench scores a
dialogue that ran out of turns (backend: 0; frontend: the last page shown). The model needs a chat template that
TRL can parse tool calls from (Qwen2.5/3, Llama 3.1/3.2, ...; ``trl.chat_template_utils.add_response_schema``).

**As the plain ColBench dialogue** (``rollout_func``): the policy writes ColBench's own messages ("I WANT TO
ANSWER:" ends the dialogue), the human's replies are inserted as the next user turns and masked out of the loss
(``env_mask`` 0), and the episode's reward goes to the reward function :func:`colbench_reward`::

    from colbench_gym.integrations.trl import colbench_reward, make_rollout_dataset, make_rollout_func

    trainer = GRPOTrainer(model=..., reward_funcs=colbench_reward, args=GRPOConfig(..., max_completion_length=2048),
                          train_dataset=make_rollout_dataset("ColBench-Backend-v0", tasks="train"),
                          rollout_func=make_rollout_func("ColBench-Backend-v0", max_turns=10, tasks="train"))

Each rollout is one episode: ``prompt_ids`` are the system instructions and the request, ``completion_ids`` the rest
of the dialogue; ``turn_spans`` (an extra field) gives the ``[start, end)`` token span of every policy turn in
``completion_ids`` (the whole agent message, with any tokens inserted for it), for turn-level methods. Generation uses the trainer's own model and ``generation_config``
(transformers; the rollout function does not drive TRL's vLLM engine yet: use the tool door there).

In both doors the training-time information (reference solution, hidden information, target page) stays in the
environment: tool results and inserted turns carry only what the simulated human says.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from colbench_gym._optional import require
from colbench_gym.envs.dialogue import ANSWER_MARKER
from colbench_gym.integrations.environments import EnvFactory, is_infra_error

EXTRA = "trl"

BACKEND_TOOL_INSTRUCTIONS = """\
You are a software engineer working with a human who wants a Python function. The human's request \
leaves out details that only they know (exact rules, constants, edge cases, output formats). Ask the \
human clarifying questions with the ask_human tool, one question per call; you have at most {max_turns} \
turns in total, the answer included. When you are ready, call submit_answer with the complete Python \
function. Keep the function name and signature that the human gave."""

FRONTEND_TOOL_INSTRUCTIONS = """\
You are a frontend designer working with a human who wants a web page. The human has a specific \
design in mind and describes it only roughly. Talk to the human with the ask_human tool: ask a \
question, or show a draft by putting one complete HTML document (<html>...</html>) in your message; \
the human sees it rendered next to the page they want and tells you the main differences. Style pages \
with Tailwind CSS 2.2 classes and use https://picsum.photos/id/48/W/H for images. You have at most \
{max_turns} turns in total, the final page included. When you are done, call submit_html with the final \
HTML page."""

EPISODE_OVER = "The episode is over: {why}. Do not call any more tools."


# -- shared pieces -----------------------------------------------------------------------------------------------

# -- door 1: environment_factory (tools) ------------------------------------------------------------------------

class ColBenchToolEnv:
    """One ColBench episode at a time, as the tools of TRL's ``environment_factory`` (see the module docstring).

    Made by :func:`make_environment_factory`; TRL creates instances with no arguments, pools them and calls
    ``reset(**row)`` before every rollout. Public methods other than ``reset`` and ``get_reward`` are tools.
    """

    _factory: EnvFactory
    _instructions: bool = True
    _seed: int | None = None
    _counter = itertools.count()

    def __init__(self) -> None:
        self.env = self._factory.make()
        self._instance = next(type(self)._counter)
        self._episodes = 0
        self._reward: float | None = None
        self._info: dict[str, Any] = {}
        self._done = True
        self._started = False

    # -- what TRL calls ------------------------------------------------------------------------------------
    def reset(self, **row: Any) -> str:
        """Start an episode; ``task_id`` or ``task_index`` in the row chooses the task (else a random draw)."""
        options: dict[str, Any] = {}
        if row.get("task_id") is not None:
            options["task_id"] = str(row["task_id"])
        elif row.get("task_index") is not None:
            options["task_index"] = int(row["task_index"])
        seed = None
        if self._episodes == 0 and self._seed is not None:
            seed = int(self._seed) * 100_003 + self._instance
        self._episodes += 1
        _, info = self.env.reset(seed=seed, options=options)
        self._reward, self._info, self._done, self._started = None, _public(info), False, True
        request = info["messages"][1]["content"]
        if not self._instructions:
            return request
        template = BACKEND_TOOL_INSTRUCTIONS if self._factory.kind == "backend" else FRONTEND_TOOL_INSTRUCTIONS
        return template.format(max_turns=self.env.unwrapped.max_turns) + "\n\nThe human's request:\n" + request

    def get_reward(self) -> float | None:
        """The episode's score; ``None`` (ignored by TRL) when the grader or the browser failed, not the agent.

        A rollout that stopped calling tools before submitting is scored as a dialogue that ran out of turns.
        """
        if not self._started:
            return None
        if not self._done:
            reward, extra = self.env.unwrapped.score_without_answer()
            self._finish(float(reward), {**self._info, **extra, "outcome": "stopped", "score": float(reward)})
        if is_infra_error(self._info):
            return None
        return self._reward

    # -- read-only views (properties are not tools) ------------------------------------------------------------
    @property
    def done(self) -> bool:
        """Whether the current episode has ended."""
        return self._done

    @property
    def info(self) -> dict[str, Any]:
        """The environment's latest ``info`` without its training-time (``privileged``) part."""
        return dict(self._info)

    # -- tool plumbing -----------------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if not self._started:
            raise RuntimeError("no episode: reset() was not called")
        if self._done:
            outcome = self._info.get("outcome")
            why = "the answer was submitted" if outcome == "answered" else "the dialogue has ended"
            raise RuntimeError(EPISODE_OVER.format(why=why))

    def _step(self, message: str) -> tuple[bool, dict[str, Any]]:
        _, reward, terminated, truncated, info = self.env.step(message)
        self._info = _public(info)
        if terminated or truncated:
            self._finish(float(reward), self._info)
        return terminated or truncated, info

    def _finish(self, reward: float, info: dict[str, Any]) -> None:
        self._reward, self._info, self._done = reward, info, True

    def _ask(self, message: str) -> str:
        self._check_open()
        if not isinstance(message, str) or not message.strip():
            raise ValueError("the message to the human is empty")
        if ANSWER_MARKER in message:
            raise ValueError(f"'{ANSWER_MARKER}' is not allowed in a message to the human; call the submit tool")
        done, info = self._step(message)
        if done:
            return EPISODE_OVER.format(why=f"the dialogue reached its limit of {self.env.unwrapped.max_turns} "
                                           "turns without a final answer")
        return info["messages"][-1]["content"]

    def _submit(self, answer: str) -> str:
        self._check_open()
        if not isinstance(answer, str):
            raise TypeError("the answer must be a string")
        self._step(f"{ANSWER_MARKER}\n{answer}")
        return "Your answer was submitted. The episode is over."


class _BackendTools(ColBenchToolEnv):
    def ask_human(self, question: str) -> str:
        """Send one message to the human who asked for the function, and get their reply.

        Args:
            question: Your message to the human, usually one clarifying question about what the function must do.

        Returns:
            The human's reply.
        """
        return self._ask(question)

    def submit_answer(self, code: str) -> str:
        """Submit the final Python function; this ends the episode and the function is tested.

        Args:
            code: The complete Python function, with the name and signature that the human gave.

        Returns:
            A confirmation that the answer was received.
        """
        return self._submit(code)


class _FrontendTools(ColBenchToolEnv):
    def ask_human(self, question: str) -> str:
        """Send one message to the human who wants the web page, and get their reply.

        Args:
            question: Your message to the human: a question, and optionally a draft page as one complete HTML document (<html>...</html>), which the human compares with the page they want.

        Returns:
            The human's reply.
        """
        return self._ask(question)

    def submit_html(self, html: str) -> str:
        """Submit the final web page; this ends the episode and the page is compared with the one the human wants.

        Args:
            html: The complete HTML document of the final page.

        Returns:
            A confirmation that the page was received.
        """
        return self._submit(html)


def _public(info: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in info.items() if k != "privileged"}


def make_environment_factory(env_id: str = "ColBench-Backend-v0", *, instructions: bool = True,
                             seed: int | None = None, name: str | None = None, **make_kwargs: Any) -> type:
    """A class for ``GRPOTrainer(environment_factory=...)``: one ColBench environment per instance, as tools.

    Args:
        env_id: ``"ColBench-Backend-v0"`` (tools ``ask_human``, ``submit_answer``) or ``"ColBench-Frontend-v0"``
            (``ask_human``, ``submit_html``).
        instructions: ``reset`` returns the tool-use instructions before the human's request (set ``False`` when
            the dataset's prompt brings its own).
        seed: seeds each instance's first reset (tasks drawn at random when the row names none).
        name: the class name, which TRL uses as the reward's name in its logs (default ``ColBenchBackend`` /
            ``ColBenchFrontend``).
        **make_kwargs: passed to ``gym.make`` (``tasks``, ``max_turns``, ``simulator``, ``similarity``, ...).
            ``privileged`` defaults to ``False``: nothing training-time is kept in ``info``.
    """
    require("trl", EXTRA)
    factory = EnvFactory(env_id, make_kwargs)
    base = _BackendTools if factory.kind == "backend" else _FrontendTools
    class_name = name or ("ColBenchBackend" if factory.kind == "backend" else "ColBenchFrontend")
    return type(class_name, (base,), {
        "_factory": factory, "_instructions": bool(instructions), "_seed": seed, "_counter": itertools.count(),
        "__module__": __name__, "__doc__": ColBenchToolEnv.__doc__,
    })


def make_environment_dataset(env_id: str = "ColBench-Backend-v0", *, repeats: int = 1, **make_kwargs: Any):
    """A ``datasets.Dataset`` for the tool door: one row per task (``repeats`` times), with a ``task_id`` column
    that ``reset`` reads and an empty user prompt that ``reset`` fills in."""
    datasets = require("datasets", EXTRA)
    tasks = EnvFactory(env_id, make_kwargs).tasks
    ids = [task.task_id for _ in range(repeats) for task in tasks]
    return datasets.Dataset.from_dict({"prompt": [[{"role": "user", "content": ""}] for _ in ids], "task_id": ids})


# -- door 2: rollout_func (the plain dialogue) -------------------------------------------------------------------

TASK_KEY = "task_id"


def make_rollout_dataset(env_id: str = "ColBench-Backend-v0", *, repeats: int = 1, **make_kwargs: Any):
    """A ``datasets.Dataset`` for :func:`make_rollout_func`: the conversational prompt of each task's episode
    (the environment's system instructions and the human's request) and a ``task_id`` column.

    The rollout function receives only the prompts, so the user message also carries the task id under the key
    ``task_id`` (chat templates ignore it); without it, the task is found by the request's text.
    """
    datasets = require("datasets", EXTRA)
    factory = EnvFactory(env_id, make_kwargs)
    env = factory.make()
    prompts, ids = [], []
    for index in range(len(factory.tasks)):
        _, info = env.reset(options={"task_index": index})
        system, user = info["messages"][0], info["messages"][1]
        prompts.append([{"role": "system", "content": system["content"], TASK_KEY: None},
                        {"role": "user", "content": user["content"], TASK_KEY: info["task_id"]}])
        ids.append(info["task_id"])
    env.close()
    return datasets.Dataset.from_dict({"prompt": prompts * repeats, "task_id": ids * repeats})


def colbench_reward(completions: Sequence[Any], colbench_reward: Sequence[float | None] | None = None,
                    **kwargs: Any) -> list[float | None]:
    """The reward function of the rollout door: each episode's score (``None`` for a grader/browser failure)."""
    if colbench_reward is None:
        raise ValueError("colbench_reward reads the 'colbench_reward' field that make_rollout_func returns; "
                         "pass rollout_func=make_rollout_func(...) to the trainer")
    return [None if r is None else float(r) for r in colbench_reward]


class _Episode:
    __slots__ = (
        "completion_ids",
        "done",
        "env",
        "env_mask",
        "info",
        "messages",
        "outcome",
        "prompt_ids",
        "reward",
        "task_id",
        "turn_spans",
    )

    def __init__(self, env: Any, prompt_ids: list[int], task_id: str):
        self.env, self.prompt_ids, self.task_id = env, prompt_ids, task_id
        self.completion_ids: list[int] = []
        self.env_mask: list[int] = []
        self.turn_spans: list[tuple[int, int]] = []
        self.reward: float | None = None
        self.info: dict[str, Any] = {}
        self.done = False
        self.outcome = ""
        self.messages: list[dict[str, str]] = []

    def add(self, ids: Sequence[int], mask: int) -> None:
        self.completion_ids.extend(int(t) for t in ids)
        self.env_mask.extend([mask] * len(ids))

    def finish(self, reward: float, info: Mapping[str, Any], outcome: str) -> None:
        self.reward, self.info, self.done = float(reward), _public(info), True
        self.outcome = outcome
        self.messages = [dict(m) for m in self.env.unwrapped.messages]
        if is_infra_error(info):
            self.reward = None


class ColBenchRollout:
    """The callable that :func:`make_rollout_func` returns: ``rollout(prompts, trainer) -> dict``.

    Attributes:
        factory: makes the environments (one per prompt of a batch, reused across batches).
        last_episodes: the episodes of the latest call (token lists, turn spans, reward, outcome, public info and
            the dialogue's ``messages`` as the environment recorded them), for inspection and tests.
    """

    def __init__(self, env_id: str, max_turn_tokens: int, step_workers: int, make_kwargs: Mapping[str, Any],
                 force_answer_on_last_turn: bool = False):
        if max_turn_tokens < 1:
            raise ValueError(f"max_turn_tokens must be >= 1, got {max_turn_tokens}")
        self.factory = EnvFactory(env_id, make_kwargs)
        self.max_turn_tokens = int(max_turn_tokens)
        language = "python" if self.factory.kind == "backend" else "html"
        self.answer_prefix = f"{ANSWER_MARKER}\n```{language}\n" if force_answer_on_last_turn else None
        self.step_workers = max(1, int(step_workers))
        self._envs: list[Any] = []
        self._by_request: dict[str, list[str]] | None = None
        self._suffix_cache: dict[str, list[int]] = {}
        self.last_episodes: list[_Episode] = []
        self.__name__ = "colbench_rollout"

    # -- the task behind a prompt -----------------------------------------------------------------------------
    def task_id_of(self, prompt: Sequence[Mapping[str, Any]]) -> str:
        for message in prompt:
            if isinstance(message, Mapping) and message.get(TASK_KEY):
                return str(message[TASK_KEY])
        request = next((m.get("content") for m in prompt if isinstance(m, Mapping) and m.get("role") == "user"), None)
        if self._by_request is None:
            self._by_request = {}
            for task in self.factory.tasks:
                self._by_request.setdefault(task.problem_description, []).append(task.task_id)
        matches = self._by_request.get(request, [])
        if len(matches) != 1:
            problem = "matches no task" if not matches else f"matches {len(matches)} tasks"
            raise ValueError(f"the prompt's request {problem} of {self.factory.env_id}; build the dataset with "
                             f"make_rollout_dataset (its user message carries '{TASK_KEY}')")
        return matches[0]

    # -- the rollout ----------------------------------------------------------------------------------------------
    def __call__(self, prompts: Sequence[Sequence[Mapping[str, Any]]], trainer: Any) -> dict[str, Any]:
        if getattr(trainer, "use_vllm", False):
            raise NotImplementedError("make_rollout_func generates with the trainer's transformers model; with "
                                      "use_vllm=True use the tool door (make_environment_factory)")
        tokenizer = getattr(trainer.processing_class, "tokenizer", trainer.processing_class)
        budget = int(trainer.max_completion_length)
        while len(self._envs) < len(prompts):
            self._envs.append(self.factory.make())
        template = dict(chat_template=getattr(trainer, "chat_template", None),
                        **(getattr(trainer, "chat_template_kwargs", None) or {}))
        episodes = []
        for prompt, env in zip(prompts, self._envs):
            task_id = self.task_id_of(prompt)
            env.reset(options={"task_id": task_id})
            messages = [{"role": m["role"], "content": m["content"]} for m in prompt]
            ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                return_dict=False, **template)
            episodes.append(_Episode(env, [int(t) for t in ids], task_id))
        eos_ids = {int(t) for t in trainer.eos_token_ids}
        turn_end = self._turn_end_id(tokenizer, eos_ids, template)

        with ThreadPoolExecutor(self.step_workers) as pool:
            while True:
                active = [e for e in episodes if not e.done]
                for episode in active:
                    if len(episode.completion_ids) >= budget:
                        self._stop(episode, "budget")
                active = [e for e in active if not e.done]
                if not active:
                    break
                starts, forced = [], []
                for episode in active:
                    starts.append(len(episode.completion_ids))
                    last = len(episode.turn_spans) >= episode.env.unwrapped.max_turns - 1
                    prefix = self.answer_prefix if self.answer_prefix is not None and last else ""
                    forced.append(prefix)
                    if prefix:  # written for the policy, not sampled: out of the loss
                        episode.add(tokenizer(prefix, add_special_tokens=False)["input_ids"], 0)
                limit = min(self.max_turn_tokens, max(budget - len(e.completion_ids) for e in active))
                generated = _generate(trainer, [e.prompt_ids + e.completion_ids for e in active], max(1, limit))
                turns = []
                for episode, tokens, start, prefix in zip(active, generated, starts, forced):
                    tokens = tokens[: max(0, budget - len(episode.completion_ids))]
                    end = next((k + 1 for k, t in enumerate(tokens) if t in eos_ids), len(tokens))
                    tokens = tokens[:end]
                    episode.add(tokens, 1)
                    episode.turn_spans.append((start, len(episode.completion_ids)))
                    turns.append((tokens, prefix + tokenizer.decode(tokens, skip_special_tokens=True)))
                results = list(pool.map(lambda pair: pair[0].env.step(pair[1][1]), zip(active, turns)))
                for episode, (tokens, _), (_, reward, terminated, truncated, info) in zip(active, turns, results):
                    if terminated or truncated:
                        episode.finish(reward, info, info.get("outcome", "answered" if terminated else "no_answer"))
                        continue
                    closing = [] if tokens and tokens[-1] == turn_end else [turn_end]
                    human = closing + self._human_suffix(tokenizer, info["messages"][-1]["content"], eos_ids,
                                                         template)
                    if len(episode.completion_ids) + len(human) >= budget:
                        self._stop(episode, "budget")
                        continue
                    episode.add(human, 0)
        self.last_episodes = episodes
        return {
            "prompt_ids": [e.prompt_ids for e in episodes],
            "completion_ids": [e.completion_ids for e in episodes],
            "logprobs": None,
            "env_mask": [e.env_mask for e in episodes],
            "turn_spans": [[list(span) for span in e.turn_spans] for e in episodes],
            "colbench_reward": [e.reward for e in episodes],
            "colbench_success": [bool(e.info.get("success", False)) for e in episodes],
            "colbench_outcome": [e.outcome for e in episodes],
            "colbench_task_id": [e.task_id for e in episodes],
            "colbench_answer": [e.info.get("answer") for e in episodes],
        }

    @staticmethod
    def _stop(episode: _Episode, outcome: str) -> None:
        """End an episode the token budget cut short, scored as a dialogue that ran out of turns."""
        unwrapped = episode.env.unwrapped
        reward, extra = unwrapped.score_without_answer()
        info = {"task_id": episode.task_id, "turn": unwrapped.turn, **extra}
        episode.finish(reward, info, outcome)

    # -- token plumbing ---------------------------------------------------------------------------------------
    @staticmethod
    def _render(tokenizer: Any, messages: list[dict[str, str]], generation_prompt: bool,
                template: Mapping[str, Any]) -> list[int]:
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=generation_prompt, tokenize=True,
                                            return_dict=False, **template)
        return [int(t) for t in ids]

    def _dummy_prefix(self, tokenizer: Any, eos_ids: set[int], template: Mapping[str, Any]) -> list[int]:
        prefix = self._render(tokenizer, [{"role": "user", "content": "dummy"},
                                          {"role": "assistant", "content": "dummy"}], False, template)
        ends = [i for i, t in enumerate(prefix) if t in eos_ids]
        if not ends:
            raise ValueError("the chat template ends an assistant turn with no end-of-sequence token; "
                             "the rollout cannot tell where the human's turn starts")
        return prefix[: ends[-1] + 1]

    def _turn_end_id(self, tokenizer: Any, eos_ids: set[int], template: Mapping[str, Any]) -> int:
        return self._dummy_prefix(tokenizer, eos_ids, template)[-1]

    def _human_suffix(self, tokenizer: Any, reply: str, eos_ids: set[int], template: Mapping[str, Any]) -> list[int]:
        """The tokens after the policy's end-of-turn token: the human's message and the next assistant header."""
        if reply in self._suffix_cache:
            return self._suffix_cache[reply]
        prefix = self._dummy_prefix(tokenizer, eos_ids, template)
        full = self._render(tokenizer, [{"role": "user", "content": "dummy"}, {"role": "assistant", "content": "dummy"},
                                        {"role": "user", "content": reply}], True, template)
        if full[: len(prefix)] != prefix:
            raise ValueError("the chat template is not prefix-preserving: the rendered dialogue changes earlier "
                             "turns when a message is added")
        suffix = full[len(prefix):]
        if len(self._suffix_cache) < 4096:
            self._suffix_cache[reply] = suffix
        return suffix


def _generate(trainer: Any, rows: list[list[int]], max_new_tokens: int) -> list[list[int]]:
    """One sampled continuation per row with the trainer's model and generation config (as TRL generates)."""
    torch = require("torch", EXTRA)
    from trl.models.utils import unwrap_model_for_generation

    tokenizer = getattr(trainer.processing_class, "tokenizer", trainer.processing_class)
    pad_id = tokenizer.pad_token_id
    width = max(len(r) for r in rows)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
    for b, row in enumerate(rows):
        input_ids[b, width - len(row):] = torch.tensor(row, dtype=torch.long)
        attention_mask[b, width - len(row):] = 1
    device = trainer.accelerator.device
    config = copy.deepcopy(trainer.generation_config)
    config.max_new_tokens = int(max_new_tokens)
    dist = getattr(trainer, "_dist", None)
    full_params = dist.summon_full_params(trainer.model_wrapped, recurse=False) if dist is not None else \
        contextlib.nullcontext()
    with (unwrap_model_for_generation(trainer.model_wrapped, trainer.accelerator,
                                      gather_deepspeed3_params=trainer.args.ds3_gather_for_generation,
                                      generation_kwargs=getattr(trainer, "generation_kwargs", None),
                                      gradient_checkpointing_kwargs=trainer.args.gradient_checkpointing_kwargs)
          as model, torch.no_grad(), full_params):
        output = model.generate(input_ids=input_ids.to(device), attention_mask=attention_mask.to(device),
                                generation_config=config)
    return output[:, width:].tolist()


def make_rollout_func(env_id: str = "ColBench-Backend-v0", *, max_turns: int | None = None,
                      max_turn_tokens: int = 256, step_workers: int = 8, force_answer_on_last_turn: bool = False,
                      **make_kwargs: Any) -> ColBenchRollout:
    """A ``rollout_func`` for ``GRPOTrainer``: one whole ColBench episode per prompt, the human's tokens masked.

    Args:
        env_id: ``"ColBench-Backend-v0"`` or ``"ColBench-Frontend-v0"``.
        max_turns: the environment's turn limit (agent messages, the answer included); default the env's (10).
        max_turn_tokens: cap on the tokens of one policy message. The whole dialogue after the prompt (policy and
            human tokens) is also capped by ``GRPOConfig.max_completion_length``; an episode that reaches it ends
            there and is scored as a dialogue that ran out of turns.
        step_workers: environments stepped at once (grading, simulated human, rendering run in threads).
        force_answer_on_last_turn: a scaffold for small models, which rarely follow the answer format (as the
            pipeline's option of that name): at the last allowed turn the policy's message starts with
            ``I WANT TO ANSWER:`` and an opened code block, inserted with ``env_mask`` 0, and the model writes the
            rest.
        **make_kwargs: passed to ``gym.make`` (``tasks``, ``simulator``, ``similarity``, ...); ``privileged``
            defaults to ``False``.

    Returns a :class:`ColBenchRollout`; its output has ``prompt_ids``, ``completion_ids``, ``logprobs`` (``None``:
    TRL recomputes them), ``env_mask`` (1 on policy tokens, 0 on the human's and the chat template's tokens around
    them), ``turn_spans`` and the fields ``colbench_reward`` / ``colbench_success`` / ``colbench_outcome`` /
    ``colbench_task_id`` / ``colbench_answer`` (the submitted answer, ``None`` without one), which TRL passes to the
    reward functions (use :func:`colbench_reward`; add your own, e.g. a format reward on ``colbench_answer``).
    """
    require("trl", EXTRA)
    if max_turns is not None:
        make_kwargs["max_turns"] = max_turns
    return ColBenchRollout(env_id, max_turn_tokens, step_workers, make_kwargs, force_answer_on_last_turn)


__all__ = [
    "BACKEND_TOOL_INSTRUCTIONS", "FRONTEND_TOOL_INSTRUCTIONS", "ColBenchRollout", "ColBenchToolEnv",
    "colbench_reward", "make_environment_dataset", "make_environment_factory", "make_rollout_dataset",
    "make_rollout_func",
]
