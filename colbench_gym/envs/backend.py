"""ColBench backend programming: ask a human for the details, then write the Python function."""

from __future__ import annotations

from typing import Any

from colbench_gym.envs.dialogue import DialogueEnv
from colbench_gym.simulators.base import Simulator

BACKEND_INSTRUCTIONS = """\
You are a software engineer working with a human who wants a Python function. The human's request \
leaves out details that only they know (exact rules, constants, edge cases, output formats). You may \
ask the human clarifying questions, one message per turn, for at most {max_turns} turns in total. \
When you are ready, write "{marker}" followed by the complete Python function, and nothing else. \
Keep the function name and signature that the human gave."""


class BackendEnv(DialogueEnv):
    """Collaborative backend programming from ColBench (SWEET-RL, arXiv 2503.15478).

    ## Description
    A simulated human wants a Python function and gives a short, underspecified request ending with
    the function signature. The human knows a reference implementation (the *hidden information*)
    and answers clarifying questions about it in plain words. The agent asks questions, then submits
    a function, which is scored by hidden unit tests against the reference.

    ## Action Space
    ``UnicodeText``: the agent's next message, any ``str`` up to 32,000 characters
    (``env.unwrapped.max_action_chars``); ``bytes`` are decoded as UTF-8 with replacement. A message
    containing ``I WANT TO ANSWER:`` is the final answer: the text after the marker, with Markdown
    code fences stripped, is the submitted code. A longer message is, with ``long_actions="truncate"``
    (default), cut to its first 32,000 characters, and the agent is told: the human's next reply
    starts with ``[Your message was cut: it had N characters, over the limit of 32,000; ...]`` (after
    a final answer, the last observation ends with it), and ``info`` has ``action_truncated_from``
    (N) and ``action_truncated_to`` (32,000); a cut answer is graded as cut. With
    ``long_actions="raise"`` it raises ``ActionTooLongError`` (a ``ValueError``) and the episode is
    left as it was.

    ## Observation Space
    ``UnicodeText``: everything an agent needs to act, as one text: the instructions (how to ask, the
    turn limit, and how to answer with ``I WANT TO ANSWER:``) as an ``"Instructions: ..."`` block,
    then the dialogue so far (``"Human: ..."`` / ``"Agent: ..."`` blocks). Feeding ``obs`` alone to a
    model each turn is a complete agent loop. The same dialogue as chat messages, starting with the
    instructions as the system message, is in ``info["messages"]`` (what the trainers and the TRL
    and OpenEnv doors use); ``env.unwrapped.instructions`` holds the instructions alone. An
    observation over 1,000,000 characters (possible only with a large ``max_turns``) is shown as the
    instructions, the request and its latest part, with ``info["observation_truncated"]``.
    ``render()`` with ``render_mode="ansi"`` returns the dialogue without the instructions.

    ## Rewards
    0 on every turn but the last. On the last, the fraction of the task's unit tests whose output
    equals the reference's, computed by the sandboxed grader (:mod:`colbench_gym.execution`). As in
    ColBench, a test whose reference output is ``None`` or raises never counts as passed. No answer
    within ``max_turns`` gives 0.

    ## Starting State
    The human's request (the task's ``problem_description``). Tasks are drawn with ``self.np_random``
    (seeded by ``reset(seed=...)``), or chosen with ``options={"task_id": str}`` or
    ``options={"task_index": i}`` (an int, 0 <= i < ``len(env.unwrapped.tasks)``). Anything else
    raises before the environment changes: options that are not a dict or a value of the wrong type
    (``TypeError``), other keys or both keys (``ValueError``), an index out of range
    (``IndexError``), an unknown ``task_id`` (``UnknownTaskError``, a ``KeyError``, naming close ids).

    ## Episode End
    Terminated when the agent answers; truncated after ``max_turns`` agent messages without an answer.

    ## Info
    Every step: ``task_id``, ``turn``, ``messages``, ``simulator_error`` (a failed simulator call is
    recorded here and the human says a fallback line), and ``privileged`` (training-time
    information: ``ground_truth``, ``hidden_information``, ``test_cases``) unless ``privileged=False``.
    Last step: ``answer``, ``outcome`` (``"answered"``/``"no_answer"``), ``score``, ``success``
    (all tests passed), ``tests`` (per-test ``name``/``status``/``detail``), ``grader`` (status counts
    and ``infra_error``: a failure of the grader itself, never the agent's; trainers should drop those;
    with ``status`` ``"empty_answer"`` or ``"no_answer"`` when there was no code to run).

    ## Arguments
    ```python
    gym.make("ColBench-Backend-v0", tasks="train", simulator=None, max_turns=10, privileged=True,
             allow_code_execution=True, grader=None, long_actions="truncate")
    ```
    * ``tasks``: built-in split (``"train"``, ``"test"``, ``"all"``), a JSONL path in the ColBench row
      format, a list of rows, or ``"hub:train"``/``"hub:test"`` (``facebook/collaborative_agent_bench``).
    * ``simulator``: any object with ``reply(SimulatorRequest) -> SimulatorReply``; default: the
      offline simulator (no model, no network). See :mod:`colbench_gym.simulators`.
    * ``privileged``: put training-time information in ``info``; set ``False`` for evaluation.
    * ``allow_code_execution``: this environment executes model-written code (sandboxed, no network,
      resource limits) and therefore opts in by default; pass ``False`` to refuse (an answer then raises
      ``CodeExecutionDisabled`` and leaves the episode as it was before that step).
    * ``grader``: a :class:`colbench_gym.execution.Grader`; default: a shared warm pool.
    * ``answer_budget_s``: wall-clock and CPU seconds an answer's tests may take in all (default: the grader's: one
      test's timeout, 2 s); the rest then fail as ``timeout``; ``info["grader"]`` has ``budget_s``, ``spent_s``,
      ``out_of_budget``, ``tests_cut``.
    * ``long_actions``: ``"truncate"`` (cut a message over 32,000 characters and tell the agent) or
      ``"raise"`` (refuse it with ``ActionTooLongError``); see Action Space.

    ## Version History
    * v0: Initial version.
    """

    kind = "backend"
    instructions_template = BACKEND_INSTRUCTIONS

    def __init__(self, tasks: Any = "train", simulator: Simulator | None = None, max_turns: int = 10,
                 privileged: bool = True, allow_code_execution: bool = True, grader: Any = None,
                 render_mode: str | None = None, long_actions: str = "truncate",
                 answer_budget_s: float | None = None):
        if answer_budget_s is not None:
            from colbench_gym.execution.grader import _check_budget

            answer_budget_s = _check_budget(answer_budget_s, "answer_budget_s")
        self.answer_budget_s = answer_budget_s
        super().__init__(tasks=tasks, simulator=simulator, max_turns=max_turns, privileged=privileged,
                         render_mode=render_mode, long_actions=long_actions)
        self.allow_code_execution = allow_code_execution
        self._grader = grader

    def score_without_answer(self) -> tuple[float, dict[str, Any]]:
        return 0.0, _not_graded("no_answer")

    def default_simulator(self) -> Simulator:
        from colbench_gym.simulators.offline_backend import OfflineBackendSimulator

        return OfflineBackendSimulator()

    @property
    def grader(self):
        if self._grader is None:
            from colbench_gym.execution import Grader, default_grader

            self._grader = default_grader() if self.allow_code_execution else Grader(allow_code_execution=False)
        return self._grader

    def score_answer(self, answer: str) -> tuple[float, dict[str, Any]]:
        from colbench_gym.execution import extract_code

        code = extract_code(answer)
        if not code.strip():
            return 0.0, _not_graded("empty_answer")
        task = self.task
        budget = {} if self.answer_budget_s is None else {"budget_s": self.answer_budget_s}
        result = self.grader.grade(code, task.ground_truth, task.test_cases, **budget)
        return result.score, {
            "success": result.success,
            "tests": [test.to_dict() for test in result.tests],
            "grader": {"status_counts": result.status_counts(), "infra_error": result.infra_error,
                       **result.budget_info()},
        }


def _not_graded(status: str) -> dict[str, Any]:
    """The last step's test fields when no code was run (same keys as a graded answer)."""
    return {"success": False, "tests": [], "grader": {"status": status, "status_counts": {}, "infra_error": False}}
