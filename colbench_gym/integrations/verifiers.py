"""ColBench as a ``verifiers`` environment (``pip install 'colbench-gym[verifiers]'``), for ``vf-eval`` and prime-rl.

verifiers' v1 API (0.3.1 and 0.4) describes an environment as a *taskset* (the rows a rollout starts from), an
``Env`` (the control flow of one episode) and a *harness* (the program that plays the agent's seat and sends its
model calls through verifiers' interception server, which records them on the trace). This module is all three;
verifiers finds them by the plugin id ``colbench_verifiers`` (a top-level package that re-exports them: plugin ids
cannot be dotted module paths):

* :class:`ColBenchTaskset` loads the tasks of a task source (``--env.taskset.tasks train``: any ``tasks=`` that
  ``gym.make`` takes as a string). A row carries the environment's instructions (system prompt), the human's
  request (prompt) and the task id, nothing else: the reference, the hidden information and the unit tests stay in
  the Gymnasium environment.
* :class:`ColBenchEnv` plays one episode per rollout on a Gymnasium environment of its own (``gym.make(...,
  privileged=False)``): each reply of the policy is one ``env.step``; the simulated human's answer is the next user
  turn; the dialogue ends when the policy writes ``I WANT TO ANSWER:`` (scored by the sandboxed grader or the
  renderer), after ``max_turns`` messages, or when the agent's own limits (``--env.agent.max-turns``) end its run.
  The score is the trace's reward ``colbench_score`` (weight 1); ``success``, ``answered`` and ``human_turns`` are
  metrics; ``trace.info["colbench"]`` has the task id, the outcome, the grader's status counts (backend) or the
  render status and the page metric (frontend). A failure of the grader or the browser (never the policy's) fails
  the episode with its reason, so that verifiers retries it (``--env.retries.max-retries``) or the trainer drops
  it, instead of training on a false 0.
* :class:`ColBenchChatHarness` (the taskset's default harness) is a plain chat loop without tools, run in the
  evaluating process: one chat completion per turn, through the interception endpoint, with the run's model and
  sampling settings. It needs no sandbox runtime and no ``uv``, and the seat's runtime defaults to ``subprocess``
  (verifiers' default is a remote Prime sandbox).

From the command line, with any OpenAI-compatible server, through verifiers' v1 eval command: ``eval`` in
verifiers 0.3.1 (named by its path, ``.venv/bin/eval``: a bare ``eval`` is the shell's builtin), ``vf-eval`` in 0.4
(``--no-push`` keeps the results local)::

    .venv/bin/eval colbench_verifiers --env.taskset.tasks procedural:test -n 20 -r 4 -m Qwen/Qwen3-1.7B \\
        --client.base-url http://localhost:8000/v1 --client.api-key-var OPENAI_API_KEY --no-push

From Python, :func:`load_environment` returns the ``vf.Env`` (``env.taskset`` lists the tasks; ``env.serving()`` and
``env.run_slot`` / ``env.run_episode`` run episodes, as the eval command does).

verifiers 0.3.1 also ships its legacy (v0) API, which ColBench does not implement: its ``vf-eval`` and the top-level
``verifiers.load_environment`` (the legacy loader) stop with :func:`legacy_api_message`, which names the two calls
above; the legacy ``vf-eval`` rejects the v1 flags before it loads anything ("unrecognized arguments"). 0.4 dropped
the legacy API: its ``vf-eval`` is the v1 command, and ``verifiers`` has no top-level ``load_environment``.
"""

from __future__ import annotations

import asyncio
import sys
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Literal

from colbench_gym._optional import require
from colbench_gym.integrations.environments import EnvFactory, is_infra_error

EXTRA = "verifiers"
TASKSET_ID = "colbench_verifiers"  # the top-level package verifiers imports (ids cannot be dotted)
REWARD_NAME = "colbench_score"

vf = require("verifiers.v1", EXTRA, package="verifiers")

# After the check above, which names the extra when verifiers is missing.
from pydantic import Field
from verifiers.v1.dialects.chat import message_to_wire
from verifiers.v1.runtimes import ProgramResult, SubprocessConfig

# -- the taskset ---------------------------------------------------------------------------------------------------

class ColBenchConfig(vf.TasksetConfig):
    """Which ColBench tasks load, under ``--env.taskset.*``."""

    env_id: Literal["ColBench-Backend-v0", "ColBench-Frontend-v0"] = "ColBench-Backend-v0"
    """The Gymnasium environment: backend (a Python function, unit tests) or frontend (a web page, similarity)."""
    tasks: str = "train"
    """The task source, as ``gym.make(env_id, tasks=...)`` takes it: ``train``, ``test``, ``procedural:train``,
    ``procedural:test``, ``hub:test``, a JSONL path, ..."""
    max_turns: int = Field(10, ge=1)
    """Policy messages per episode, the answer included (ColBench: 10)."""
    simulator_base_url: str | None = None
    """An OpenAI-compatible endpoint for the simulated human (``OpenAISimulator``); unset, the offline simulator."""
    simulator_model: str | None = None
    """The simulated human's model at ``simulator_base_url``."""
    similarity: Literal["ssim", "clip"] | None = None
    """Frontend only: the page metric (the environment's default when unset)."""

    def make_kwargs(self) -> dict[str, Any]:
        """The ``gym.make`` keywords this config stands for (training-time information off)."""
        kwargs: dict[str, Any] = {"tasks": self.tasks, "max_turns": self.max_turns, "privileged": False}
        if (self.simulator_base_url is None) != (self.simulator_model is None):
            raise ValueError("simulator_base_url and simulator_model go together: set both or neither")
        if self.simulator_base_url is not None:
            from colbench_gym.simulators import OpenAISimulator

            kwargs["simulator"] = OpenAISimulator(base_url=self.simulator_base_url, model=self.simulator_model)
        if self.similarity is not None:
            if self.env_id != "ColBench-Frontend-v0":
                raise ValueError("similarity is an option of ColBench-Frontend-v0 only")
            kwargs["similarity"] = self.similarity
        return kwargs


class ColBenchData(vf.TaskData):
    """One ColBench task as verifiers carries it: what the policy sees first, and the task's id."""

    task_id: str
    """The Gymnasium task id (``reset(options={"task_id": ...})``)."""


class ColBenchTask(vf.Task[ColBenchData, vf.State, vf.TaskConfig]):
    """A ColBench task; its score comes from the Gymnasium environment, recorded by :class:`ColBenchEnv`."""

    @property
    def key(self) -> str:
        return self.data.task_id


class ColBenchTaskset(vf.Taskset[ColBenchTask, ColBenchConfig]):
    """The tasks of one task source, each row the system instructions and the human's request."""

    def load(self) -> list[ColBenchTask]:
        factory = EnvFactory(self.config.env_id, self.config.make_kwargs())
        env = factory.make()
        try:
            tasks = []
            for index, task in enumerate(factory.tasks):
                _, info = env.reset(options={"task_id": task.task_id})
                system, request = info["messages"][0]["content"], info["messages"][1]["content"]
                tasks.append(ColBenchTask(ColBenchData(idx=index, id=task.task_id, name=task.task_id,
                                                       task_id=task.task_id, prompt=request,
                                                       system_prompt=system), self.config.task))
        finally:
            env.close()
        return tasks


# -- the harness ---------------------------------------------------------------------------------------------------

class ColBenchChatHarnessConfig(vf.HarnessConfig):
    """The in-process chat loop's knobs (none beyond a harness's own)."""


class ColBenchChatHarness(vf.Harness[ColBenchChatHarnessConfig]):
    """One chat completion per turn, sent from this process to the rollout's interception endpoint.

    The model sees the system instructions, the request and the dialogue so far as chat messages, with no tools;
    its reply is the turn. An HTTP error of the endpoint fails the turn with the endpoint's message.
    """

    APPENDS_SYSTEM_PROMPT = True
    SUPPORTS_RESUME = True
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def launch(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data, tool_interception_url=None):
        import httpx

        system, prompt = self.resolve_prompt(data)
        messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
        if isinstance(prompt, str):
            messages.append({"role": "user", "content": prompt})
        elif prompt is not None:
            messages.extend(message_to_wire(message) for message in prompt)
        url = endpoint.rstrip("/") + "/chat/completions"
        try:
            async with httpx.AsyncClient(timeout=httpx.Timeout(None, connect=30.0)) as client:
                response = await client.post(url, headers={"Authorization": f"Bearer {secret}"},
                                             json={"model": ctx.model, "messages": messages})
        except httpx.TransportError as err:
            return ProgramResult(1, "", f"the model endpoint could not be reached: {type(err).__name__}: {err}")
        if response.status_code >= 400:
            return ProgramResult(1, "", f"chat completion failed: HTTP {response.status_code}: {response.text}")
        return ProgramResult(0, "", "")  # the interception server recorded the turn on the trace


# -- the episode ---------------------------------------------------------------------------------------------------

class ColBenchEnvConfig(vf.EnvConfig):
    """The policy's seat; it runs in a local runtime by default (the chat loop executes nothing)."""

    agent: vf.AgentConfig = vf.AgentConfig(runtime=SubprocessConfig())
    """The policy under evaluation or training (``--env.agent.*``)."""


class ColBenchEnv(vf.Env[ColBenchEnvConfig]):
    """One ColBench dialogue per episode, on a Gymnasium environment of its own (see the module docstring)."""

    def __init__(self, config: ColBenchEnvConfig) -> None:
        super().__init__(config)
        taskset_config = self.taskset.config
        self._factory = EnvFactory(taskset_config.env_id, taskset_config.make_kwargs())
        self._factory.tasks  # noqa: B018  (a bad task source fails here, with its message, not in every rollout)

    @property
    def env_id(self) -> str:
        # verifiers 0.3's legacy loader (``verifiers.load_environment``, which its ``vf-eval`` calls) imports this
        # plugin, calls its ``load_environment`` and reads ``env_id`` off the result, expecting a legacy
        # ``Environment``. A v1 Env has no such attribute (v1 reads ``config.env_id``); raising here, where the legacy
        # path first touches the Env, tells its caller which calls do run ColBench instead of a bare AttributeError.
        raise AttributeError(legacy_api_message())

    async def run(self, task: ColBenchTask, agents: vf.Agents) -> None:
        env = await asyncio.to_thread(self._factory.make)
        try:
            await self._play(env, task, agents)
        finally:
            env.close()

    async def _play(self, env: Any, task: ColBenchTask, agents: vf.Agents) -> None:
        await asyncio.to_thread(env.reset, options={"task_id": task.data.task_id})
        reward, info, human_turns = 0.0, {}, 0
        async with agents.agent.interaction(task) as interaction:
            segment = await interaction.turn()  # the request is the task's prompt: the policy speaks first
            while True:
                if segment.terminated:  # the agent's own limits ended the run before an answer
                    reward, extra = await asyncio.to_thread(env.unwrapped.score_without_answer)
                    info = {"outcome": "stopped", **extra}
                    break
                _, reward, terminated, truncated, info = await asyncio.to_thread(env.step, segment.last_reply)
                if terminated or truncated:
                    break
                human_turns += 1
                segment = await interaction.turn(info["messages"][-1]["content"])
        trace = interaction.trace
        grader = info.get("grader") if isinstance(info.get("grader"), dict) else {}
        trace.info["colbench"] = {
            "task_id": task.data.task_id,
            "outcome": info.get("outcome"),
            "score": float(reward),
            "grader_status": grader.get("status"),
            "status_counts": grader.get("status_counts"),
            "render_status": info.get("render_status"),
            "similarity_metric": info.get("similarity_metric"),
            "simulator_error": info.get("simulator_error"),
        }
        if is_infra_error(info):
            raise RuntimeError(f"the grader or the browser failed on task {task.data.task_id!r} (not the "
                               f"policy's failure): {grader or info.get('render_status')}")
        trace.record_reward(REWARD_NAME, float(reward), 1.0)
        trace.record_metric("success", float(bool(info.get("success", False))))
        trace.record_metric("answered", float(info.get("outcome") == "answered"))
        trace.record_metric("human_turns", float(human_turns))


V1_EVAL_ENTRY_POINT = "verifiers.v1.cli.eval.main:main"


def v1_eval_command() -> str:
    """The installed verifiers' v1 eval command, as a shell runs it: ``vf-eval`` in 0.4; in 0.3 the script is named
    ``eval`` (its ``vf-eval`` is the legacy CLI's), given as a path because a bare ``eval`` is the shell's builtin."""
    names = [ep.name for ep in entry_points(group="console_scripts") if ep.value == V1_EVAL_ENTRY_POINT]
    if not names or "vf-eval" in names:
        return "vf-eval"
    script = Path(sys.executable).parent / names[0]
    return str(script) if script.exists() else f"env {names[0]}"  # `env` runs the program, never the builtin


def legacy_api_message() -> str:
    """Why verifiers' legacy (v0) entry points cannot run ColBench, and the calls that do."""
    from verifiers import __version__

    return (f"ColBench ({TASKSET_ID}) is a verifiers v1 environment; verifiers.load_environment and vf-eval of "
            f"verifiers {__version__} are its legacy (v0) API, which cannot run it. Evaluate with "
            f"`{v1_eval_command()} {TASKSET_ID} --env.taskset.tasks train -m <model> --client.base-url <url> "
            f"--client.api-key-var <VAR> --no-push`; in Python, "
            f"`colbench_gym.integrations.verifiers.load_environment(tasks=\"train\")` returns the v1 Env.")


def load_environment(env_id: str = "ColBench-Backend-v0", tasks: str = "train", max_turns: int = 10,
                     **config: Any) -> ColBenchEnv:
    """The ColBench ``vf.Env`` (built by verifiers' own v1 loader, as the v1 eval command builds it).

    Args:
        env_id: ``"ColBench-Backend-v0"`` or ``"ColBench-Frontend-v0"``.
        tasks: the task source (a string ``gym.make`` takes: ``"train"``, ``"procedural:test"``, a JSONL path, ...).
        max_turns: policy messages per episode, the answer included.
        **config: other :class:`ColBenchConfig` fields (``simulator_base_url``, ``simulator_model``,
            ``similarity``), and ``agent`` / ``retries`` / ``timeout`` ... of the env config.
    """
    taskset = {"id": TASKSET_ID, "env_id": env_id, "tasks": tasks, "max_turns": max_turns}
    for name in list(config):
        if name in ColBenchConfig.model_fields:
            taskset[name] = config.pop(name)
    env_config = vf.resolve_env_config({"taskset": taskset, **config})
    return vf.load_environment(env_config)


__all__ = [
    "ColBenchChatHarness", "ColBenchConfig", "ColBenchData", "ColBenchEnv", "ColBenchEnvConfig", "ColBenchTask",
    "ColBenchTaskset", "legacy_api_message", "load_environment", "v1_eval_command",
]
