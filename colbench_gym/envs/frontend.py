"""ColBench frontend design: show the human web pages, hear what differs, then submit the final page."""

from __future__ import annotations

import hashlib
import re
import threading
from collections import OrderedDict
from typing import Any, ClassVar

from colbench_gym.envs.dialogue import DialogueEnv
from colbench_gym.envs.spaces import UnicodeText
from colbench_gym.simulators.base import Simulator, SimulatorRequest

TAILWIND_LINK = '<link href="https://cdn.jsdelivr.net/npm/tailwindcss@2.2.19/dist/tailwind.min.css" rel="stylesheet">'
OUTPUT_MARKER = "OUTPUT:"
# Room for the words around a page in one message, over the renderer's page limit (1,000,000 bytes by default).
MESSAGE_CHARS_BEYOND_PAGE = 100_000

FRONTEND_INSTRUCTIONS = """\
You are a frontend designer working with a human who wants a web page. The human has a specific \
design in mind and describes it only roughly; they can see any page you show them next to the page \
they want, and will tell you the main differences. Each turn, write one message: you may ask a \
question, and you may show a page by writing "OUTPUT:" followed by one complete HTML document \
(<html>...</html>). Style pages with Tailwind CSS 2.2 classes, loaded with \
""" + TAILWIND_LINK + """, and use https://picsum.photos/id/48/W/H for images (W and H in pixels). \
You have at most {max_turns} turns. When you are done, write "{marker}" followed by your final \
HTML page, and nothing else."""

_HTML_DOC = re.compile(r"(?:<!doctype html[^>]*>\s*)?<html\b.*?(?P<end></html\s*>|\Z)", re.IGNORECASE | re.DOTALL)
_BODY = re.compile(r"<body\b.*?(?P<end></body\s*>|\Z)", re.IGNORECASE | re.DOTALL)


def _find_page(text: str) -> tuple[str | None, bool]:
    """The page in a message (see :func:`extract_html`) and whether its closing tag was found."""
    marker = text.find(OUTPUT_MARKER)
    region = text[marker + len(OUTPUT_MARKER):] if marker >= 0 else text
    for pattern in (_HTML_DOC, _BODY):
        match = pattern.search(region)
        if match:
            page = match.group(0).strip()
            # an unclosed page inside a Markdown fence
            return re.sub(r"\s*```\s*\Z", "", page), bool(match.group("end"))
    return None, False


def extract_html(text: str) -> str | None:
    """The page in an agent message: after ``OUTPUT:`` when present, the first ``<html>…</html>``,
    else the first ``<body>…</body>`` (an unclosed element runs to the end); None if there is none."""
    if not isinstance(text, str):
        return None
    return _find_page(text)[0]


class _TargetCache:
    """Target renders shared by every env in the process (each target page is rendered once)."""

    def __init__(self, size: int = 256):
        self.size = size
        self._items: OrderedDict[tuple, Any] = OrderedDict()
        self._lock = threading.Lock()
        self._inflight: dict[tuple, threading.Lock] = {}

    def get(self, key: tuple, render) -> Any:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
            gate = self._inflight.setdefault(key, threading.Lock())
        with gate:  # two envs asking for the same target render it once
            with self._lock:
                if key in self._items:
                    return self._items[key]
            result = render()
            with self._lock:
                if result.ok:  # failures are not cached: the next episode tries again
                    self._items[key] = result
                    while len(self._items) > self.size:
                        self._items.popitem(last=False)
                self._inflight.pop(key, None)
            return result


_TARGETS = _TargetCache()


class FrontendEnv(DialogueEnv):
    """Collaborative frontend design from ColBench (SWEET-RL, arXiv 2503.15478).

    ## Description
    A simulated human wants a web page and describes it in a sentence or two. They have a target
    page in mind (a Tailwind CSS page, the task's ``ground_truth``) and can *see*: whenever the
    agent shows a page, it is rendered in a locked-down headless Chromium and the human compares it
    with the rendered target and says the main differences. The agent iterates, then submits a
    final page, which is rewarded by its visual similarity to the target.

    ## Action Space
    ``UnicodeText``: the agent's next message, any ``str``. A message may contain one page: the text
    after ``OUTPUT:`` when present; in it, the first ``<html>…</html>`` document, else the first
    ``<body>…</body>`` (:func:`extract_html`). A message containing ``I WANT TO ANSWER:`` ends the
    episode; the page after the marker is the final page.

    Long messages and pages, exactly: a page over the renderer's limit (``RenderConfig.max_html_bytes``,
    1,000,000 UTF-8 bytes by default) is refused, never rendered and never cut: render status
    ``"refused"`` (the human says the page is too big to open; as the final page it scores 0). A
    message is taken whole up to ``env.unwrapped.max_action_chars`` characters: that page limit plus
    100,000 (1,100,000 by default), so a page under the limit is never cut. A longer message is, with
    ``long_actions="truncate"`` (default), cut to that many characters, and the agent is told: the
    human's next reply starts with ``[Your message was cut: it had N characters, ...]`` (after a final
    answer, the last observation ends with it) and ``info`` has ``action_truncated_from`` (N) and
    ``action_truncated_to``; a page the cut went through is refused (status ``"refused"``), never
    rendered cut; a page that ended before the cut is rendered. With ``long_actions="raise"`` such a
    message raises ``ActionTooLongError`` (a ``ValueError``) and the episode is left as it was.

    ## Observation Space
    ``UnicodeText``: everything an agent needs to act, as one text: the instructions (how to show a
    page, the turn limit, how to answer with ``I WANT TO ANSWER:``) as an ``"Instructions: ..."``
    block, then the dialogue so far (``"Human: ..."`` / ``"Agent: ..."`` blocks); feeding ``obs``
    alone to a model each turn is a complete agent loop. The same as chat messages, the instructions
    as the system message, in ``info["messages"]`` (what the trainers and the TRL and OpenEnv doors
    use). Over 1,000,000 characters: the instructions, the request and the latest part, with
    ``info["observation_truncated"]``. Screenshots are not part of the observation (``render()`` with
    ``render_mode="rgb_array"`` returns the agent's last one, or a white viewport before the first
    page; ``"ansi"`` the dialogue without the instructions).

    ## Rewards
    0 on every turn but the last. On the last: the similarity in [0, 1] between the screenshot of
    the agent's most recent page (the final answer's page, else the last page shown during the
    dialogue, also when the turns run out) and the screenshot of the target page. The metric is
    chosen explicitly (``similarity=``): ``"clip"`` (default, as in ColBench: cosine similarity of
    CLIP ViT-B/32 image embeddings; needs torch, transformers and the weights) or ``"ssim"``
    (structural similarity, numpy only; not comparable with CLIP numbers). No page, or a page that
    fails to render (refused, timed out, crashed), scores exactly 0.

    ## Starting State
    The human's request (``problem_description``). Tasks are drawn with ``self.np_random``, or chosen
    with ``options={"task_id": str}`` or ``options={"task_index": i}`` (0 <= i < ``len(env.unwrapped.tasks)``).
    Anything else raises before the environment changes: options that are not a dict or a value of
    the wrong type (``TypeError``), other keys or both keys (``ValueError``), an index out of range
    (``IndexError``), an unknown ``task_id`` (``UnknownTaskError``, a ``KeyError``, naming close ids).

    ## Episode End
    Terminated when the agent answers; truncated after ``max_turns`` agent messages without one
    (the last page shown is still scored).

    ## Info
    Every step: ``task_id``, ``turn``, ``messages``, ``simulator_error``, ``privileged``
    (``{"ground_truth": target HTML}``, unless ``privileged=False``) and ``render``: for a message
    with a page, the render's status, blocked requests (count and first URLs), size, clipping and
    time; None otherwise. Last step also: ``answer``, ``outcome`` (``"answered"``/``"no_answer"``),
    ``score`` (= reward), ``similarity``, ``similarity_metric`` (``"clip"``/``"ssim"``),
    ``similarity_config``, ``render_status`` (``"ok"``, ``"no_page"``, or the failed render's status),
    ``success`` (similarity >= ``success_threshold``) and ``infra_error`` (the target or the browser
    failed, not the agent; trainers should drop such episodes).

    ## Arguments
    ```python
    gym.make("ColBench-Frontend-v0", tasks="train", simulator=None, max_turns=10, privileged=True,
             similarity="clip", similarity_kwargs=None, renderer=None, render_config=None,
             render_workers=1, success_threshold=0.95, long_actions="truncate")
    ```
    * ``tasks``: built-in split (``"train"``, ``"test"``, ``"all"``), a JSONL path (rows with
      ``problem_description`` and ``ground_truth``), a list of rows, ``"hub:train"``/``"hub:test"``
      (ColBench on the Hub), or ``"websight:train"``/``"websight:test"`` (WebSight v0.2, see
      :mod:`colbench_gym.tasks.websight`).
    * ``simulator``: default :class:`~colbench_gym.simulators.offline_frontend.OfflineFrontendSimulator`
      (compares the renders and their DOM summaries, no model). Requests carry ``agent_html``,
      ``agent_render`` and ``target_render`` (PNG bytes) and, in ``extra``, ``agent_dom``,
      ``target_dom``, ``agent_render_status`` and ``agent_render_error``.
    * ``similarity``: ``"clip"`` or ``"ssim"`` or an :class:`~colbench_gym.rewards.ImageSimilarity`;
      ``similarity_kwargs`` go to its constructor (e.g. ``{"model": "/path/to/clip"}``). A metric
      that cannot load raises here; nothing falls back silently.
    * ``renderer`` / ``render_config`` / ``render_workers``: a :class:`~colbench_gym.rendering.Renderer`,
      else the process-wide renderer shared by all envs with the same ``render_config`` (default
      :class:`RenderConfig`) and ``render_workers`` (browsers; raise it when many envs step in threads).
    * ``long_actions``: ``"truncate"`` (cut a message over ``max_action_chars`` and tell the agent) or
      ``"raise"`` (refuse it with ``ActionTooLongError``); see Action Space.

    ## Setup
    ``pip install 'colbench-gym[frontend]'`` (add ``[clip]`` for CLIP), a Chromium (``apt-get install
    chromium-headless-shell``, or ``chromium``, or ``COLBENCH_CHROMIUM``), and the offline Tailwind CSS:
    ``python -m colbench_gym.rendering.assets --fetch``.

    ## Version History
    * v0: Initial version.
    """

    kind = "frontend"
    instructions_template = FRONTEND_INSTRUCTIONS
    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi", "human", "rgb_array"], "render_fps": 1}

    def __init__(self, tasks: Any = "train", simulator: Simulator | None = None, max_turns: int = 10,
                 privileged: bool = True, similarity: Any = "clip", similarity_kwargs: dict[str, Any] | None = None,
                 renderer: Any = None, render_config: Any = None, render_workers: int = 1,
                 success_threshold: float = 0.95, render_mode: str | None = None, long_actions: str = "truncate"):
        from colbench_gym.rendering import shared_renderer
        from colbench_gym.rewards import make_similarity

        if isinstance(tasks, str) and tasks.startswith("websight:"):
            from colbench_gym.tasks.websight import load_websight

            tasks = load_websight(tasks.removeprefix("websight:"))
        super().__init__(tasks=tasks, simulator=simulator, max_turns=max_turns, privileged=privileged,
                         render_mode=render_mode, long_actions=long_actions)
        # Built before the first episode so that a missing browser, stylesheet or CLIP model is
        # reported now, with its set-up command, and never turns into silent zero rewards.
        self.similarity = make_similarity(similarity, **(similarity_kwargs or {}))
        self.renderer = renderer if renderer is not None else shared_renderer(render_config, render_workers)
        # A message may carry a whole page of the renderer's largest size, and some words around it.
        page_limit = getattr(getattr(self.renderer, "config", None), "max_html_bytes", 1_000_000)
        self.max_action_chars = int(page_limit) + MESSAGE_CHARS_BEYOND_PAGE
        self.action_space = UnicodeText(self.max_action_chars)
        # What pickle and deepcopy rebuild instead of copying (browser processes, a model), when built here.
        self._rebuild = ((similarity, similarity_kwargs or {}, render_config, render_workers)
                         if isinstance(similarity, str) and renderer is None else None)
        self.success_threshold = float(success_threshold)
        self._last_page: tuple[str, Any] | None = None  # (html, RenderResult) of the agent's latest page
        self._turn_page: tuple[str, Any] | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        if self._rebuild is not None:
            state["renderer"] = state["similarity"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        from colbench_gym.rendering import shared_renderer
        from colbench_gym.rewards import make_similarity

        self.__dict__.update(state)
        if self._rebuild is not None:
            similarity, similarity_kwargs, render_config, render_workers = self._rebuild
            self.similarity = make_similarity(similarity, **similarity_kwargs)
            self.renderer = shared_renderer(render_config, render_workers)

    # -- hooks ------------------------------------------------------------------------------
    def default_simulator(self) -> Simulator:
        from colbench_gym.simulators.offline_frontend import OfflineFrontendSimulator

        return OfflineFrontendSimulator()

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        result = super().reset(seed=seed, options=options)  # bad options raise with the last episode intact
        self._last_page = None
        self._turn_page = None
        return result

    def target_render(self):
        """The current task's target page, rendered once per process (LRU cache)."""
        html = self.task.ground_truth
        key = (hashlib.sha256(html.encode("utf-8", "surrogatepass")).hexdigest(), self.renderer.config)
        return _TARGETS.get(key, lambda: self.renderer.render(html))

    def _show(self, text: str) -> dict[str, Any]:
        html, closed = _find_page(text)
        self._turn_page = None
        if html is None:
            return {"render": None}
        if self._step_truncated_from is not None and not closed:
            # The page ran into the cut: what is left is not the agent's page, so it is not scored.
            from colbench_gym.rendering import RenderResult

            result = RenderResult("refused", error=(
                f"the page was cut with its message ({self._step_truncated_from:,} characters, over the limit of "
                f"{self.max_action_chars:,}): not rendered"))
        else:
            result = self.renderer.render(html)
        self._turn_page = self._last_page = (html, result)
        return {"render": result.summary()}

    def on_agent_message(self, text: str) -> dict[str, Any]:
        return self._show(text)

    def simulator_request(self) -> SimulatorRequest:
        target = self.target_render()
        extra: dict[str, Any] = {"target_dom": target.dom if target.ok else None,
                                 "target_render_status": target.status}
        html, png = None, None
        if self._turn_page is not None:
            html, result = self._turn_page
            png = result.png if result.ok else None
            extra.update(agent_dom=result.dom if result.ok else None, agent_render_status=result.status,
                         agent_render_error=result.error)
        return SimulatorRequest(task=self.task, messages=list(self.messages[1:]), agent_html=html,
                                agent_render=png, target_render=target.png if target.ok else None, extra=extra)

    def score_answer(self, answer: str) -> tuple[float, dict[str, Any]]:
        extra = self._show(answer) if extract_html(answer) is not None else {"render": None}
        return self._score(extra)

    def score_without_answer(self) -> tuple[float, dict[str, Any]]:
        return self._score({})

    def _score(self, extra: dict[str, Any]) -> tuple[float, dict[str, Any]]:
        info: dict[str, Any] = {**extra, "similarity": 0.0, "similarity_metric": self.similarity.name,
                                "similarity_config": self.similarity.describe(), "success": False,
                                "infra_error": False}
        if self._last_page is None:
            info["render_status"] = "no_page"
            return 0.0, info
        _, agent = self._last_page
        info["render_status"] = agent.status
        info["final_render"] = agent.summary()
        if not agent.ok:
            info["infra_error"] = agent.infra_error
            return 0.0, info
        target = self.target_render()
        if not target.ok:
            info.update(render_status=f"target_{target.status}", infra_error=True,
                        target_error=target.error)
            return 0.0, info
        key = f"{self.task.task_id}:{hashlib.sha256(target.png).hexdigest()}"
        value = float(self.similarity.score(agent.png, target.png, reference_key=key))
        info.update(similarity=value, success=value >= self.success_threshold)
        return value, info

    def render(self):
        if self.render_mode == "rgb_array":
            import numpy as np

            if self._last_page is None or not self._last_page[1].ok:
                # Nothing to show yet (or the page failed): an empty white viewport, for display only.
                config = self.renderer.config
                return np.full((config.viewport_height, config.viewport_width, 3), 255, dtype=np.uint8)
            return np.asarray(self._last_page[1].image())
        return super().render()
