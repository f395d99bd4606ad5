"""One browser worker: a child process that owns a Playwright driver and one Chromium.

Started by :class:`colbench_gym.rendering.Renderer` as ``python -m colbench_gym.rendering.worker``
in its own session, so the renderer can kill the whole process tree when a page passes its
deadline. It reads render requests on stdin and writes results on the original stdout (anything
else printed goes to stderr). Each render gets a fresh browser context; while the caller is busy with
a result, the context that produced it is closed and the next one prepared.
"""

from __future__ import annotations

import base64
import json
import os
import sys
import threading
import time
from typing import Any

from colbench_gym.rendering import protocol
from colbench_gym.rendering.assets import (
    load_tailwind_css,
    placeholder_png,
    script_path,
)
from colbench_gym.rendering.routing import PAGE_URL, classify

# Chromium switches: the ones the project requires, plus network lock-down in depth (requests the
# router does not intercept meet a dead proxy and a resolver that resolves nothing).
CHROMIUM_ARGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
    "--disable-crash-reporter", "--disable-breakpad", "--disable-domain-reliability",
    "--proxy-server=http://127.0.0.1:9", "--proxy-bypass-list=<-loopback>",
    "--host-resolver-rules=MAP * ~NOTFOUND", "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
    "--font-render-hinting=none", "--hide-scrollbars",
    # A page that allocates without end crashes its own renderer early instead of the machine.
    "--js-flags=--max-old-space-size=512",
)
# Same page, same pixels: pages that draw with Math.random get the same sequence every time.
SEEDED_RANDOM = """(() => { let s = 0x2f6e2b1; Math.random = function () { s = (s + 0x6d2b79f5) | 0;
  let t = Math.imul(s ^ (s >>> 15), 1 | s); t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296; }; })();"""
# Playwright's service_workers="block" makes register() resolve silently; we make it fail, and count it.
BLOCK_SERVICE_WORKERS = """if (self.ServiceWorkerContainer) { ServiceWorkerContainer.prototype.register = function (url) {
  try { self.__colbenchBlocked("service-worker:" + String(url)); } catch (e) {}
  return Promise.reject(new DOMException("service workers are disabled", "SecurityError")); }; }"""
MAX_LISTED_URLS = 20
# After `load`: wait for web fonts, finish finite CSS animations and cancel endless ones (what the
# screenshot's animations="disabled" does, done first so the DOM summary matches the pixels).
# The caret is hidden the same way (an autofocused input would otherwise blink into the pixels).
SETTLE = """async (limits) => {
  if (document.fonts) { await document.fonts.ready; }
  for (const animation of document.getAnimations()) {
    try { animation.finish(); } catch (e) { animation.cancel(); }
  }
  const caret = document.createElement("style");
  caret.textContent = "*, *::before, *::after { caret-color: transparent !important; }";
  (document.head || document.documentElement).appendChild(caret);
  const body = document.body;
  const height = Math.max(document.documentElement.scrollHeight, body ? body.scrollHeight : 0);
  const summary = DOM_SUMMARY;
  return { height, dom: limits.dom ? summary(limits) : null };
}"""


def _descendant_process_groups() -> list[int]:
    """Process groups of our descendants outside our own group (Playwright starts Chromium detached)."""
    children: dict[int, list[int]] = {}
    groups: dict[int, int] = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid, ppid, pgid = int(entry), int(fields[1]), int(fields[2])
        children.setdefault(ppid, []).append(pid)
        groups[pid] = pgid
    own, found, stack = os.getpgid(0), set(), [os.getpid()]
    while stack:
        for child in children.get(stack.pop(), []):
            stack.append(child)
            if groups.get(child, own) != own:
                found.add(groups[child])
    return sorted(found)


def _exit_with_parent(interval: float = 0.5) -> None:
    """If the renderer process dies, exit too (the driver and the browser follow when our pipes close).

    A watchdog on the parent pid rather than ``PR_SET_PDEATHSIG``, which fires when the *thread*
    that started us ends, and renderers are used from short-lived threads.
    """
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(interval)
        os._exit(4)

    threading.Thread(target=watch, daemon=True, name="parent-watchdog").start()


class _Page:
    """A fresh context and page, with the lock-down routes installed, waiting for one render."""

    def __init__(self, worker: BrowserWorker):
        config = worker.config
        self.html = ""
        self.css = b""
        self.blocked = 0
        self.blocked_urls: list[str] = []
        self.served: dict[str, int] = {}
        self.worker = worker
        self.context = worker.browser.new_context(
            viewport={"width": config["viewport_width"], "height": config["viewport_height"]},
            device_scale_factor=1, service_workers="block", reduced_motion="reduce", accept_downloads=False,
            java_script_enabled=config["javascript"], locale="en-US", timezone_id="UTC", color_scheme="light",
        )
        self.context.expose_binding("__colbenchBlocked", lambda source, url: self._block(str(url)))
        self.context.add_init_script(SEEDED_RANDOM + BLOCK_SERVICE_WORKERS)
        self.context.route("**/*", self._route)
        self.context.route_web_socket(lambda url: True, self._route_web_socket)
        self.page = self.context.new_page()
        # Screenshots go straight to the DevTools protocol: Playwright's screenshot() re-does the
        # settling above in extra round trips and encodes PNGs at the slowest zlib level.
        self.devtools = self.context.new_cdp_session(self.page)

    def _block(self, url: str) -> None:
        self.blocked += 1
        if len(self.blocked_urls) < MAX_LISTED_URLS:
            self.blocked_urls.append(url[:300])

    def _route(self, route: Any) -> None:
        url = route.request.url
        target = classify(url)
        self.served[target.kind] = self.served.get(target.kind, 0) + 1
        if target.kind == "page":
            route.fulfill(status=200, content_type="text/html; charset=utf-8", body=self.html.encode("utf-8"))
        elif target.kind == "tailwind":
            route.fulfill(status=200, content_type="text/css; charset=utf-8", body=self.css)
        elif target.kind == "tailwind_play":
            script = ("(function(){var s=document.createElement('style');s.textContent="
                      + json.dumps(self.css.decode("utf-8"))
                      + ";(document.head||document.documentElement).appendChild(s);"
                      "window.tailwind=window.tailwind||{config:{}};})();")
            route.fulfill(status=200, content_type="application/javascript", body=script)
        elif target.kind == "image":
            route.fulfill(status=200, content_type="image/png", body=placeholder_png(target.width, target.height))
        else:
            self.served.pop("blocked", None)
            self._block(url)
            route.abort("blockedbyclient")

    def _route_web_socket(self, socket: Any) -> None:
        self._block(socket.url)
        socket.close(code=1008, reason="network access is disabled")

    def render(self, request: dict[str, Any]) -> tuple[dict[str, Any], bytes | None]:
        config = self.worker.config
        self.html = request["html"]
        self.css = self.worker.stylesheet(self.html)
        timeout_ms = max(200.0, float(request["timeout"]) * 1000.0)
        page = self.page
        page.set_default_timeout(timeout_ms)
        page.goto(PAGE_URL, wait_until="load", timeout=timeout_ms)
        # One round trip: web fonts, animations settled as the screenshot will show them, page size, DOM.
        settled = page.evaluate(self.worker.settle_script, {
            "dom": config["dom_summary"], "max_texts": 120, "max_blocks": 40, "max_images": 40,
            "max_height": config["max_height"]})
        width = config["viewport_width"]
        page_height = int(settled["height"])
        # Clipped at max_height; short pages are shot at the viewport's height.
        height = max(min(page_height, config["max_height"]), config["viewport_height"])
        shot = self.devtools.send("Page.captureScreenshot", {
            "format": "png", "optimizeForSpeed": True, "captureBeyondViewport": height > config["viewport_height"],
            "clip": {"x": 0, "y": 0, "width": width, "height": height, "scale": 1}})
        png = base64.b64decode(shot["data"])
        header = {
            "status": "ok", "width": width, "height": height, "page_height": page_height,
            "clipped": page_height > height, "dom": settled["dom"],
        }
        return header, png

    def close(self) -> None:
        self.context.close()


class BrowserWorker:
    """Owns the browser; serves render requests one at a time."""

    def __init__(self, config: dict[str, Any]):
        from playwright.sync_api import sync_playwright

        self.config = config
        self.full_css = load_tailwind_css(config.get("asset_dir"))
        self._purger: Any = None
        parsing = None
        if config["tailwind"] == "purged":
            # Parse the stylesheet while Chromium starts (the launch mostly waits on the driver).
            parsing = threading.Thread(target=self._parse_stylesheet, daemon=True)
            parsing.start()
        self.settle_script = SETTLE.replace("DOM_SUMMARY", script_path("dom_summary.js").read_text(encoding="utf-8"))
        self.playwright = sync_playwright().start()
        self.browser = self.playwright.chromium.launch(
            executable_path=config["chromium"], headless=True,
            args=list(CHROMIUM_ARGS) + list(config.get("extra_args", [])),
            timeout=config["startup_timeout"] * 1000.0, handle_sigint=False, handle_sigterm=False,
            handle_sighup=False,
        )
        self.next_page: _Page | None = None
        self.used_page: _Page | None = None
        if parsing is not None:
            parsing.join()
            if self._purger is None:
                raise RuntimeError("could not parse the Tailwind stylesheet")

    def _parse_stylesheet(self) -> None:
        from colbench_gym.rendering.tailwind import TailwindPurger

        self._purger = TailwindPurger(self.full_css)

    def stylesheet(self, html: str) -> bytes:
        return self._purger.purge(html).encode("utf-8") if self._purger else self.full_css

    def prepare(self) -> None:
        """Between requests: close the last render's context, open the next one."""
        if self.used_page is not None:
            page, self.used_page = self.used_page, None
            page.close()
        if self.next_page is None:
            self.next_page = _Page(self)

    def render(self, request: dict[str, Any]) -> tuple[dict[str, Any], bytes | None]:
        from playwright.sync_api import Error as PlaywrightError
        from playwright.sync_api import TimeoutError as PlaywrightTimeout

        started = time.perf_counter()
        page: _Page | None = None
        png: bytes | None = None
        try:
            self.prepare()
            page, self.next_page = self.next_page, None
            header, png = page.render(request)
        except PlaywrightTimeout as err:
            header = {"status": "timeout", "error": f"page did not finish in time: {str(err).splitlines()[0]}"}
        except PlaywrightError as err:
            status = "error" if self.browser.is_connected() else "crashed"
            header = {"status": status, "error": str(err).splitlines()[0][:500] if str(err) else type(err).__name__}
        if page is not None:
            header.update(blocked_requests=page.blocked, blocked_urls=page.blocked_urls, served=page.served)
            if header["status"] == "ok":
                self.used_page = page  # closed after the result is sent, off the caller's critical path
            else:  # a page that failed may still be busy: close it before the next request can be charged
                try:
                    page.close()
                except Exception:  # noqa: BLE001 (a context that will not close means a broken browser)
                    header["restart"] = True
        header["seconds"] = time.perf_counter() - started
        if not self.browser.is_connected():
            header["restart"] = True
        return header, png if header["status"] == "ok" else None

    def close(self) -> None:
        try:
            self.browser.close()
        finally:
            self.playwright.stop()


def main() -> int:
    _exit_with_parent()
    requests_fd = sys.stdin.fileno()
    # Keep the real stdout for results; anything a library prints goes to stderr instead.
    results_fd = os.dup(sys.stdout.fileno())
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    try:
        config, _ = protocol.receive(requests_fd)
        worker = BrowserWorker(config)
    except Exception as err:  # noqa: BLE001 (reported to the renderer, which raises it)
        protocol.send(results_fd, {"type": "failed", "error": f"{type(err).__name__}: {err}"})
        return 1
    protocol.send(results_fd, {"type": "ready", "process_groups": _descendant_process_groups(),
                               "browser_version": worker.browser.version})
    try:
        while True:
            broken = None
            try:
                worker.prepare()  # while the renderer is busy with the last result
            except Exception as err:  # noqa: BLE001 (the browser is gone; say so on the next request)
                broken = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
            try:
                request, _ = protocol.receive(requests_fd)
            except protocol.ChannelClosed:
                break
            if request.get("type") == "quit":
                break
            if broken is not None:
                # The page was never loaded: the renderer retries it on a fresh browser.
                protocol.send(results_fd, {"status": "crashed", "error": f"browser failed before the page "
                                           f"loaded: {broken}", "retry": True, "restart": True})
                return 3
            header, png = worker.render(request)
            protocol.send(results_fd, header, png)
            if header.get("restart"):
                return 3
    finally:
        try:
            worker.close()
        except Exception:  # noqa: BLE001, S110 (exiting anyway; the renderer kills what is left)
            pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
