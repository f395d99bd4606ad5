"""Render untrusted HTML to PNG in a locked-down headless Chromium, fast and with hard deadlines.

    from colbench_gym.rendering import Renderer, RenderConfig

    with Renderer(RenderConfig(timeout=10), workers=2) as renderer:   # thread-safe
        result = renderer.render(html)
        if result.ok:
            open("page.png", "wb").write(result.png)
        else:
            print(result.status, result.error)      # refused | timeout | error | crashed | infra_error

Each worker is a child process (:mod:`colbench_gym.rendering.worker`) that keeps one Playwright
driver and one Chromium alive across renders and gives every render a fresh browser context.
Playwright's sync objects belong to the thread that made them; a process per browser sidesteps
that, and gives a deadline that cannot be ignored: when a render passes ``timeout`` the worker's
whole process tree (driver, browser, renderer processes) is killed, the render returns status
``"timeout"``, and the next render starts a new browser. Pages over ``max_html_bytes`` are refused
before any browser sees them. A failed render never carries an image, so it cannot be scored.

Page set-up (see :class:`RenderConfig`): viewport 1280x800 CSS px at device scale 1 (the width of
a laptop screen, Tailwind's ``xl`` breakpoint; the height only matters for ``h-screen``), full-page
screenshot clipped to ``max_height`` (4096 px) rows, CSS animations and transitions stopped,
reduced motion, caret hidden, scrollbars hidden, seeded ``Math.random``, light colour scheme,
``en-US``/UTC. Network: see :mod:`colbench_gym.rendering.routing`; service workers are blocked and
WebSockets closed; blocked requests are counted in the result. Each page's JavaScript heap is
capped (512 MB), so a page that allocates without end crashes its own tab (status ``"error"``).
"""

from __future__ import annotations

import atexit
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from colbench_gym.rendering import protocol
from colbench_gym.rendering.assets import load_tailwind_css

# Chromium's headless shell first: the same engine without the desktop browser around it, it
# creates a browser context and its renderer in about a third of the CPU time of the full browser.
DEFAULT_CHROMIUM_PATHS = (
    "/usr/lib/chromium/chromium-headless-shell",  # Debian's chromium-headless-shell (no wrapper script)
    "/usr/bin/chromium-headless-shell",
    "/usr/bin/chromium",
    "/usr/bin/chromium-browser",
    "/usr/bin/google-chrome",
)
STATUSES = ("ok", "refused", "timeout", "error", "crashed", "infra_error")


class RendererUnavailable(RuntimeError):
    """The renderer cannot run here (no browser, no Playwright); the message says how to set it up."""


def find_chromium(path: str | None = None) -> str:
    """``path``, else ``$COLBENCH_CHROMIUM``, else a system Chromium; raises when there is none."""
    candidates = [path] if path else []
    if os.environ.get("COLBENCH_CHROMIUM"):
        candidates.append(os.environ["COLBENCH_CHROMIUM"])
    if not candidates:
        candidates += list(DEFAULT_CHROMIUM_PATHS)
        candidates += [found for name in ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome")
                       if (found := shutil.which(name))]
    for candidate in candidates:
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise RendererUnavailable(
        f"no Chromium executable found (tried {', '.join(c for c in candidates if c)}). Install one with "
        "`apt-get install chromium-headless-shell` or `make setup`, or point COLBENCH_CHROMIUM at a Chromium/Chrome binary."
    )


@dataclass(frozen=True)
class RenderConfig:
    """How pages are rendered. Every field changes pixels or limits, so it is part of the cache key."""

    viewport_width: int = 1280
    """CSS pixels; the screenshot is always this wide."""
    viewport_height: int = 800
    """CSS pixels; what ``100vh`` means. Short pages are screenshotted at this height."""
    max_height: int = 4096
    """Screenshots of taller pages keep only the top ``max_height`` rows (``result.clipped``)."""
    max_html_bytes: int = 1_000_000
    """Larger pages (UTF-8 bytes) are refused before the browser (status ``"refused"``)."""
    timeout: float = 15.0
    """Seconds per render, enforced by killing the worker's process tree."""
    startup_timeout: float = 60.0
    """Seconds for a worker to start its browser."""
    chromium: str | None = None
    """Browser executable; default ``$COLBENCH_CHROMIUM``, else the system headless shell, else the system Chromium."""
    tailwind: Literal["purged", "full"] = "purged"
    """Serve each page only the Tailwind rules its source can use (same styles, 10x less CSS to parse), or all."""
    asset_dir: str | None = None
    """Folder with the offline Tailwind CSS; default ``$COLBENCH_CACHE/assets`` or ``~/.cache/colbench/assets``."""
    javascript: bool = True
    """Run page scripts (ColBench pages are static, but agents may write scripts)."""
    dom_summary: bool = True
    """Also return the visible text blocks, main blocks and images (for the simulated human)."""
    renders_per_browser: int = 1000
    """Restart a worker's browser after this many renders, to bound leaks."""
    extra_args: tuple[str, ...] = ()
    """More Chromium switches."""


@dataclass
class RenderResult:
    """One render. ``png`` is set only when ``status == "ok"``: failures cannot be scored by accident."""

    status: str
    png: bytes | None = None
    error: str | None = None
    width: int = 0
    height: int = 0
    page_height: int = 0
    clipped: bool = False
    blocked_requests: int = 0
    blocked_urls: list[str] = field(default_factory=list)
    served: dict[str, int] = field(default_factory=dict)
    dom: dict[str, Any] | None = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == "ok" and self.png is not None

    @property
    def infra_error(self) -> bool:
        """The renderer failed, not the page (trainers should drop such episodes)."""
        return self.status == "infra_error"

    def image(self):
        """The screenshot as an RGB ``PIL.Image`` (requires a successful render)."""
        if not self.ok:
            raise ValueError(f"render status is {self.status!r}: there is no image")
        import io

        from PIL import Image

        return Image.open(io.BytesIO(self.png)).convert("RGB")

    def summary(self) -> dict[str, Any]:
        """JSON-able facts about the render (no image, no DOM), for ``info`` and logs."""
        data = asdict(self)
        data.pop("png")
        data.pop("dom")
        return data


class _Worker:
    """Parent-side handle of one worker process; used by one thread at a time."""

    def __init__(self, config: RenderConfig, chromium: str):
        self.config = config
        self.chromium = chromium
        self.process: subprocess.Popen | None = None
        self.process_groups: list[int] = []
        self.renders = 0
        self.browser_version = ""
        self.starts = 0
        self._stderr = None

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        self.kill()
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (open for the worker's lifetime; closed by kill())
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "colbench_gym.rendering.worker"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
            start_new_session=True, env=env, close_fds=True,
        )
        self.starts += 1
        self.renders = 0
        settings = asdict(self.config)
        settings.update(chromium=self.chromium, extra_args=list(self.config.extra_args))
        deadline = time.monotonic() + self.config.startup_timeout
        try:
            protocol.send(self.process.stdin.fileno(), settings, deadline=deadline)
            header, _ = protocol.receive(self.process.stdout.fileno(), deadline=deadline)
        except (protocol.DeadlineExceeded, protocol.ChannelClosed) as err:
            detail = self.stderr_tail()
            self.kill()
            raise RendererUnavailable(f"the browser worker did not start ({err}): {detail}") from None
        if header.get("type") != "ready":
            self.kill()
            raise RendererUnavailable(f"the browser worker did not start: {header.get('error')}")
        self.process_groups = list(header.get("process_groups", []))
        self.browser_version = header.get("browser_version", "")

    def stderr_tail(self, limit: int = 2000) -> str:
        if self._stderr is None:
            return ""
        try:
            self._stderr.seek(0, os.SEEK_END)
            size = self._stderr.tell()
            self._stderr.seek(max(0, size - limit))
            return self._stderr.read().decode("utf-8", errors="replace").strip()
        except (OSError, ValueError):
            return ""

    def kill(self) -> None:
        """Kill the worker, its driver and its browser (each in its own process group)."""
        process, self.process = self.process, None
        groups, self.process_groups = self.process_groups, []
        if process is not None:
            for group in [process.pid, *groups]:
                try:
                    os.killpg(group, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            for stream in (process.stdin, process.stdout):
                try:
                    stream.close()
                except OSError:
                    pass
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def stop(self, timeout: float = 5.0) -> None:
        """Ask the worker to close its browser; kill it if it does not exit in time."""
        if self.alive:
            try:
                protocol.send(self.process.stdin.fileno(), {"type": "quit"}, deadline=time.monotonic() + 1)
                self.process.wait(timeout=timeout)
            except (protocol.DeadlineExceeded, protocol.ChannelClosed, subprocess.TimeoutExpired, OSError):
                pass
        self.kill()

    def render(self, html: str, timeout: float) -> RenderResult:
        if not self.alive or self.renders >= self.config.renders_per_browser:
            self.start()
        self.renders += 1
        started = time.monotonic()
        # The worker gets the deadline minus a margin, so an ordinary slow page times out inside
        # Playwright (cheap) and only a page that hangs the browser costs a restart.
        inner = max(0.2, timeout - max(0.5, 0.2 * timeout))
        deadline = started + timeout
        try:
            protocol.send(self.process.stdin.fileno(), {"type": "render", "html": html, "timeout": inner},
                          deadline=deadline)
            header, png = protocol.receive(self.process.stdout.fileno(), deadline=deadline)
        except protocol.DeadlineExceeded:
            self.kill()
            return RenderResult("timeout", error=f"render passed its {timeout:g} s deadline; browser killed",
                                seconds=time.monotonic() - started)
        except protocol.ChannelClosed:
            detail = self.stderr_tail(500)
            self.kill()
            return RenderResult("crashed", error=f"browser worker exited during the render: {detail}",
                                seconds=time.monotonic() - started)
        if header.get("restart"):
            self.kill()
        if header.get("retry"):
            return RenderResult("retry", error=header.get("error"))
        result = RenderResult(
            status=header.get("status", "error"), png=png if header.get("status") == "ok" else None,
            error=header.get("error"), width=header.get("width", 0), height=header.get("height", 0),
            page_height=header.get("page_height", 0), clipped=bool(header.get("clipped", False)),
            blocked_requests=header.get("blocked_requests", 0), blocked_urls=header.get("blocked_urls", []),
            served=header.get("served", {}), dom=header.get("dom"), seconds=time.monotonic() - started,
        )
        return result


_LIVE_RENDERERS: weakref.WeakSet[Renderer] = weakref.WeakSet()


class Renderer:
    """A pool of ``workers`` browsers; ``render`` may be called from any number of threads."""

    def __init__(self, config: RenderConfig | None = None, workers: int = 1):
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.config = config or RenderConfig()
        require_playwright()
        # Fail now, with the set-up command, rather than inside a worker.
        load_tailwind_css(self.config.asset_dir)
        self.chromium = find_chromium(self.config.chromium)
        self._workers = [_Worker(self.config, self.chromium) for _ in range(workers)]
        self._idle: queue.Queue[_Worker] = queue.Queue()
        for worker in self._workers:
            self._idle.put(worker)
        self._closed = False
        self._owner_pid = os.getpid()
        _LIVE_RENDERERS.add(self)

    @property
    def workers(self) -> int:
        return len(self._workers)

    @property
    def restarts(self) -> int:
        """Browser starts beyond the first of each worker (timeouts, crashes, recycling)."""
        return sum(max(0, worker.starts - 1) for worker in self._workers)

    def start(self) -> Renderer:
        """Start every browser now instead of at first use (raises :class:`RendererUnavailable`)."""
        for worker in self._workers:
            if not worker.alive:
                worker.start()
        return self

    def render(self, html: str, timeout: float | None = None) -> RenderResult:
        """Render one page. Never raises for a bad page; see :class:`RenderResult` for the statuses."""
        if self._closed:
            raise RuntimeError("render() on a closed Renderer")
        if os.getpid() != self._owner_pid:
            raise RuntimeError("a Renderer cannot be used in a forked child: create one in the child")
        if not isinstance(html, str):
            raise TypeError(f"html must be a str, got {type(html).__name__}")
        encoded = html.encode("utf-8", errors="replace")
        html = encoded.decode("utf-8")  # lone surrogates (not Unicode) become "?": the page cannot be sent as is
        size = len(encoded)
        if size > self.config.max_html_bytes:
            return RenderResult("refused", error=f"page is {size} bytes, over the {self.config.max_html_bytes}"
                                                 "-byte limit: not rendered")
        timeout = self.config.timeout if timeout is None else float(timeout)
        worker = self._idle.get()
        try:
            for _attempt in range(2):
                try:
                    result = worker.render(html, timeout)
                except RendererUnavailable as err:
                    return RenderResult("infra_error", error=str(err))
                if result.status != "retry":
                    return result
            return RenderResult("infra_error", error=f"browser failed twice before loading the page: {result.error}")
        finally:
            self._idle.put(worker)

    def render_many(self, pages: Iterable[str], timeout: float | None = None) -> list[RenderResult]:
        """Render pages on all workers at once; results in input order."""
        pages = list(pages)
        if self.workers == 1 or len(pages) < 2:
            return [self.render(page, timeout) for page in pages]
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            return list(pool.map(lambda page: self.render(page, timeout), pages))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if os.getpid() != self._owner_pid:
            return
        threads = [threading.Thread(target=worker.stop) for worker in self._workers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def __enter__(self) -> Renderer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001, S110 (interpreter shutdown)
            pass


def require_playwright() -> None:
    from colbench_gym._optional import require

    require("playwright.sync_api", "frontend", package="playwright")


_SHARED: dict[tuple[RenderConfig, int], Renderer] = {}
_SHARED_LOCK = threading.Lock()


def shared_renderer(config: RenderConfig | None = None, workers: int = 1) -> Renderer:
    """One long-lived renderer per (config, workers) per process, shared by every environment."""
    key = (config or RenderConfig(), workers)
    with _SHARED_LOCK:
        renderer = _SHARED.get(key)
        if renderer is None or renderer._closed or renderer._owner_pid != os.getpid():
            renderer = Renderer(key[0], workers)
            _SHARED[key] = renderer
        return renderer


@atexit.register
def _close_all() -> None:
    for renderer in list(_LIVE_RENDERERS):
        try:
            renderer.close()
        except Exception:  # noqa: BLE001, S110 (exiting)
            pass
