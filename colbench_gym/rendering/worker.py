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
from colbench_gym.rendering.routing import PAGE_URL, Route, classify

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
# Same page, same pixels: Math.random and crypto's random values come from a seeded generator, and the
# clock reads a fixed instant (2025-01-01 12:00 UTC), so that a page printing the time or a random pick
# draws the same thing every time. Timers still run.
SEEDED_RANDOM = """(() => { let s = 0x2f6e2b1; const next = function () { s = (s + 0x6d2b79f5) | 0;
  let t = Math.imul(s ^ (s >>> 15), 1 | s); t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296; };
  Math.random = next;
  if (self.crypto) {
    const randomBytes = (view) => { const bytes = new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
      for (let i = 0; i < bytes.length; i++) bytes[i] = Math.floor(next() * 256); return view; };
    Crypto.prototype.getRandomValues = function (view) { return randomBytes(view); };
    Crypto.prototype.randomUUID = function () { const b = randomBytes(new Uint8Array(16));
      b[6] = (b[6] & 0x0f) | 0x40; b[8] = (b[8] & 0x3f) | 0x80;
      const h = [...b].map((x) => x.toString(16).padStart(2, "0")).join("");
      return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`; };
  }
  const RealDate = Date, NOW = RealDate.UTC(2025, 0, 1, 12, 0, 0);
  function FixedDate(...args) {
    if (!new.target) return new RealDate(NOW).toString();
    return args.length ? new RealDate(...args) : new RealDate(NOW);
  }
  FixedDate.prototype = RealDate.prototype;
  FixedDate.now = () => NOW; FixedDate.parse = RealDate.parse; FixedDate.UTC = RealDate.UTC;
  self.Date = FixedDate; })();"""
# Playwright's service_workers="block" makes register() resolve silently; we make it fail, and count it.
BLOCK_SERVICE_WORKERS = """if (self.ServiceWorkerContainer) { ServiceWorkerContainer.prototype.register = function (url) {
  try { self.__colbenchBlocked("service-worker:" + String(url)); } catch (e) {}
  return Promise.reject(new DOMException("service workers are disabled", "SecurityError")); }; }"""
MAX_LISTED_URLS = 20
# After `load`, in an isolated world (the page's scripts cannot replace what it calls), reading the document
# through Document.prototype (a page element named "body" or "fonts" cannot stand in for it): load lazy
# images now and wait for every image (else the page's height depends on timing), wait for web fonts, finish
# finite CSS animations and cancel endless ones (what the screenshot's animations="disabled" does, done first
# so the DOM summary matches the pixels), stop SVG animations at their start, and hide the caret (an
# autofocused input would blink into the pixels). Returns the page height, the URL of the document shown
# (a page that navigated away shows another one) and the DOM summary (None if a hostile page breaks it).
SETTLE = """async (limits) => {
  const doc = (name) => Object.getOwnPropertyDescriptor(Document.prototype, name).get.call(document);
  const call = (proto, name, object, ...args) => proto[name].apply(object, args);
  const all = (selector) => [...call(Document.prototype, "querySelectorAll", document, selector)];
  const images = all("img");
  for (const img of images) { if (img.loading === "lazy") img.loading = "eager"; }
  await Promise.all(images.map((img) => img.complete ? null : new Promise((done) => {
    img.addEventListener("load", done, { once: true }); img.addEventListener("error", done, { once: true });
  })));
  const fonts = doc("fonts");
  if (fonts) { await fonts.ready; }
  for (const animation of call(Document.prototype, "getAnimations", document)) {
    try { animation.finish(); } catch (e) { animation.cancel(); }
  }
  for (const svg of all("svg")) {
    try { svg.pauseAnimations(); svg.setCurrentTime(0); } catch (e) {}
  }
  const caret = call(Document.prototype, "createElement", document, "style");
  caret.textContent = "*, *::before, *::after { caret-color: transparent !important; }";
  call(Node.prototype, "appendChild", doc("head") || doc("documentElement"), caret);
  const body = doc("body");
  const height = Math.max(doc("documentElement").scrollHeight, body ? body.scrollHeight : 0);
  const shown = performance.getEntriesByType("navigation")[0];
  const summary = DOM_SUMMARY;
  let dom = null, domError = null;
  if (limits.dom) {
    try { dom = summary(limits); } catch (e) { domError = String(e).toWellFormed().slice(0, 300); }
  }
  return { height, url: shown ? shown.name : null, dom, dom_error: domError };
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
        try:
            target = classify(url)
        except ValueError:  # a URL the router cannot read is not one it serves
            target = Route("blocked")
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
        settled = self._settle({"dom": config["dom_summary"], "max_texts": 120, "max_blocks": 40, "max_images": 40,
                                "max_height": config["max_height"]})
        if settled["url"] != PAGE_URL:
            return {"status": "error", "error": _plain(f"the page navigated away (to {settled['url']})")[:500]}, None
        if settled["dom_error"]:
            print(f"DOM summary failed: {settled['dom_error']}", file=sys.stderr)
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

    def _settle(self, limits: dict[str, Any]) -> dict[str, Any]:
        """Run :data:`SETTLE` in an isolated world of the page's main frame (one world per render)."""
        frame = self.devtools.send("Page.getFrameTree")["frameTree"]["frame"]["id"]
        world = self.devtools.send("Page.createIsolatedWorld", {"frameId": frame, "worldName": "colbench-settle"})
        result = self.devtools.send("Runtime.evaluate", {
            "expression": f"({self.worker.settle_script})({json.dumps(limits)})",
            "contextId": world["executionContextId"], "awaitPromise": True, "returnByValue": True})
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            raise SettleError(_plain(details.get("exception", {}).get("description") or details.get("text", "")))
        return result["result"]["value"]

    def close(self) -> None:
        self.context.close()


class SettleError(RuntimeError):
    """The settling script failed on this page (a page problem, reported as the render's ``error``)."""


def _plain(text: str) -> str:
    """Text that can be sent and saved as UTF-8 (page scripts can produce lone surrogates)."""
    return text.encode("utf-8", "replace").decode("utf-8")


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
        except (PlaywrightError, SettleError) as err:
            status = "error" if self.browser.is_connected() else "crashed"
            message = str(err).splitlines()[0][:500] if str(err) else type(err).__name__
            header = {"status": status, "error": _plain(message)}
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
