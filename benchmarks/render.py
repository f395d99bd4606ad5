"""Render throughput: a new browser per page versus the pooled renderer, on the real ColBench pages.

    python benchmarks/render.py                      # 100 real pages from ../shared/colbench-data
    python benchmarks/render.py --limit 20 --workers 1   # quicker, one worker only
    COLBENCH_DATA=/path/to/colbench-data python benchmarks/render.py

Measured in one run, on the same pages, with the same lock-down (local Tailwind, placeholder
images, everything else blocked), screenshots of the same size:

  (o) the anchor: the original ColBench render method, re-implemented (no code copied): one
      browser and one page per environment, reused for every render -- each page's HTML written to
      a file and opened as a ``file://`` page, then a full-page screenshot -- with no isolation
      between renders (one origin, one page, whatever the last page left). Through Playwright
      with the same Chromium, the full Tailwind stylesheet served for its CDN link (what the CDN
      would send) and the network otherwise blocked as here, so that no page waits on a request;
      the browser's start is not counted, as it is paid once per environment;
  (o') the same with the Tailwind link blocked as well: the pages unstyled, as the method renders
      them offline (for reference: the cheapest the anchor can be, not the same pixels);
  (a) new browser per render: start Playwright, launch Chromium, render, close (what a renderer
      without a pool does), serving the full Tailwind stylesheet;
  (b) the pooled renderer (``colbench_gym.rendering.Renderer``, default config: long-lived
      browser, fresh context per page, trimmed Tailwind, DOM summary), one worker;
  (b') the same, timing only the render() calls while the caller works between them (as an
      episode does: simulator, policy); the worker prepares the next fresh context meanwhile;
  (c) the pooled renderer serving the full stylesheet, to show what pooling alone buys;
  (d) the pool with one worker per core (``--workers N``), rendering from N threads;
  (e) a floor for every renderer that gives each page a fresh browser context: N processes with one
      browser each doing only that (stylesheet inlined, no routing or lock-down, no DOM summary).

Prints renders/s for each, the ratios against (a), and on a line of its own
``ratio vs original method: X``: the pool with one worker per core, (d) (or (b) with one worker),
against (o). Falls back to the built-in pages (and says so) when the real rows are not there.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from colbench_gym.rendering import RenderConfig, Renderer
from colbench_gym.rendering.assets import load_tailwind_css, placeholder_png
from colbench_gym.rendering.renderer import find_chromium
from colbench_gym.rendering.routing import PAGE_URL, classify
from colbench_gym.rendering.worker import CHROMIUM_ARGS


def load_pages(limit: int | None) -> tuple[list[str], str]:
    folder = Path(os.environ.get("COLBENCH_DATA", REPO.parent / "shared" / "colbench-data"))
    path = folder / "frontend_dev.jsonl"
    if path.exists():
        pages = [json.loads(line)["ground_truth"] for line in path.open(encoding="utf-8") if line.strip()]
        source = f"{len(pages)} real ColBench pages ({path})"
    else:
        from colbench_gym.tasks import load_builtin

        pages = [task.ground_truth for task in load_builtin("all", "frontend")]
        source = f"{len(pages)} built-in pages (real rows not found at {path})"
    return (pages[:limit] if limit else pages), source


def _router(body: bytes, css: bytes):
    """The renderer's lock-down routes for one page (Playwright passes the route as one argument)."""

    def route(request_route) -> None:
        target = classify(request_route.request.url)
        if target.kind == "page":
            request_route.fulfill(status=200, content_type="text/html; charset=utf-8", body=body)
        elif target.kind == "tailwind":
            request_route.fulfill(status=200, content_type="text/css", body=css)
        elif target.kind == "image":
            request_route.fulfill(status=200, content_type="image/png", body=placeholder_png(target.width, target.height))
        else:
            request_route.abort()

    return route


def original_method(pages: list[str], config: RenderConfig, stylesheet: bool = True) -> tuple[float, int]:
    """(o) The original method: one browser and one page, reused; each page written to a file, opened
    as ``file://``, screenshotted full-page. Returns the seconds of the renders and how many gave a PNG.
    ``stylesheet=False`` blocks the Tailwind link too (o'): what the method renders offline, unstyled."""
    import tempfile

    from playwright.sync_api import sync_playwright

    css = load_tailwind_css()

    def route(request_route) -> None:
        url = request_route.request.url
        if url.startswith("file:"):  # the page itself, from disk
            request_route.continue_()
            return
        target = classify(url)
        if target.kind == "tailwind" and stylesheet:
            request_route.fulfill(status=200, content_type="text/css", body=css)
        elif target.kind == "image":
            request_route.fulfill(status=200, content_type="image/png", body=placeholder_png(target.width, target.height))
        else:
            request_route.abort()

    ok = 0
    with tempfile.TemporaryDirectory(prefix="colbench-original-render-") as folder, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=find_chromium(config.chromium), args=list(CHROMIUM_ARGS))
        page = browser.new_page(viewport={"width": config.viewport_width, "height": config.viewport_height},
                                device_scale_factor=1)
        page.route("**/*", route)
        started = time.perf_counter()
        for index, html in enumerate(pages):
            path = Path(folder) / f"page_{index}.html"
            path.write_text(html, encoding="utf-8")
            try:
                page.goto(path.as_uri(), wait_until="load", timeout=config.timeout * 1000)
                ok += bool(page.screenshot(full_page=True))
            except Exception:  # noqa: BLE001, S110 (a page that fails is counted as such, as the original would go on)
                pass
        elapsed = time.perf_counter() - started
        browser.close()
    return elapsed, ok


def new_browser_per_render(pages: list[str], config: RenderConfig) -> tuple[float, int]:
    """Baseline: everything started and stopped for each page."""
    from playwright.sync_api import sync_playwright

    css = load_tailwind_css()
    chromium = find_chromium(config.chromium)
    ok = 0
    started = time.perf_counter()
    for html in pages:
        route = _router(html.encode("utf-8"), css)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium, args=list(CHROMIUM_ARGS))
            context = browser.new_context(viewport={"width": config.viewport_width, "height": config.viewport_height},
                                          device_scale_factor=1, service_workers="block")
            context.route("**/*", route)
            page = context.new_page()
            page.goto(PAGE_URL, wait_until="load", timeout=config.timeout * 1000)
            height = page.evaluate("document.documentElement.scrollHeight")
            png = page.screenshot(full_page=True, animations="disabled", caret="hide",
                                  clip={"x": 0, "y": 0, "width": config.viewport_width,
                                        "height": min(height, config.max_height)})
            ok += bool(png)
            browser.close()
    return time.perf_counter() - started, ok


def pooled(pages: list[str], config: RenderConfig, workers: int = 1) -> tuple[float, int, float]:
    with Renderer(config, workers=workers) as renderer:
        begin = time.perf_counter()
        renderer.start()  # browser start-up is reported apart: it is paid once per worker
        startup = time.perf_counter() - begin
        started = time.perf_counter()
        results = renderer.render_many(pages) if workers > 1 else [renderer.render(page) for page in pages]
        elapsed = time.perf_counter() - started
    return elapsed, sum(r.ok for r in results), startup


def pooled_latency(pages: list[str], config: RenderConfig, pause: float) -> tuple[float, int]:
    """Mean render() time when the caller works ``pause`` seconds between renders, as an episode does
    (simulator, policy); the worker prepares the next context meanwhile. Pauses are not counted."""
    total, ok = 0.0, 0
    with Renderer(config).start() as renderer:
        for page in pages:
            time.sleep(pause)
            started = time.perf_counter()
            ok += renderer.render(page).ok
            total += time.perf_counter() - started
    return total / len(pages), ok


def _floor_shard(shard: int, shards: int, limit: int | None) -> int:
    """One process of :func:`fresh_context_floor`: warm up, say ``ready``, wait for ``go``, render, say the time."""
    import base64
    import re

    from playwright.sync_api import sync_playwright

    from colbench_gym.rendering.tailwind import TailwindPurger

    config = RenderConfig()
    purger = TailwindPurger(load_tailwind_css())
    pages = []
    for html in load_pages(limit)[0][shard::shards]:
        css = purger.purge(html)
        pages.append(re.sub(r"<link[^>]*tailwind[^>]*>", lambda _, css=css: f"<style>{css}</style>", html,
                            flags=re.IGNORECASE))
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=find_chromium(config.chromium), args=list(CHROMIUM_ARGS))

        def render(html: str) -> bytes:
            context = browser.new_context(viewport={"width": config.viewport_width,
                                                    "height": config.viewport_height}, device_scale_factor=1)
            page = context.new_page()
            page.set_content(html, wait_until="load")
            height = min(page.evaluate("document.documentElement.scrollHeight"), config.max_height)
            shot = context.new_cdp_session(page).send("Page.captureScreenshot", {
                "format": "png", "optimizeForSpeed": True, "captureBeyondViewport": height > config.viewport_height,
                "clip": {"x": 0, "y": 0, "width": config.viewport_width,
                         "height": max(height, config.viewport_height), "scale": 1}})
            context.close()
            return base64.b64decode(shot["data"])

        for html in pages[:3]:
            render(html)
        print("ready", flush=True)
        sys.stdin.readline()
        started = time.perf_counter()
        ok = sum(bool(render(html)) for html in pages)
        print(f"done {time.perf_counter() - started} {ok}", flush=True)
        browser.close()
    return 0


def fresh_context_floor(limit: int | None, workers: int) -> tuple[float, int]:
    """The least any renderer with a fresh context per page can do: ``workers`` processes, each with one
    browser, render their share of the pages with nothing else -- the stylesheet already inlined (no
    request, no routing, no lock-down), ``set_content`` instead of a navigation, no settling, no DOM
    summary. Returns the wall time of the rendering phase (all processes started together) and the count."""
    import subprocess

    procs = [subprocess.Popen([sys.executable, __file__, "--floor-shard", str(i), str(workers)]
                              + (["--limit", str(limit)] if limit else []),
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for i in range(workers)]
    for proc in procs:
        if proc.stdout.readline().strip() != "ready":
            raise RuntimeError("a floor process failed to start")
    started = time.perf_counter()
    for proc in procs:
        proc.stdin.write("go\n")
        proc.stdin.flush()
    ok = 0
    for proc in procs:
        ok += int(proc.stdout.readline().split()[2])
        proc.wait()
    return time.perf_counter() - started, ok


def main() -> int:
    if sys.argv[1:2] == ["--floor-shard"]:
        limit = int(sys.argv[5]) if sys.argv[4:5] == ["--limit"] else None
        return _floor_shard(int(sys.argv[2]), int(sys.argv[3]), limit)
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--limit", type=int, default=None, help="use only the first N pages")
    parser.add_argument("--baseline-limit", type=int, default=None,
                        help="pages for the slow baseline (default: all); its rate is per page either way")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                        help="also measure a pool of N workers (default: one per core)")
    parser.add_argument("--pause", type=float, default=0.5, help="caller work between renders for (b')")
    args = parser.parse_args()
    pages, source = load_pages(args.limit)
    config = RenderConfig()
    print(f"pages: {source}; browser: {find_chromium(config.chromium)}; machine: {os.cpu_count()} cores; "
          f"load average {os.getloadavg()[0]:.1f}")

    seconds, ok = original_method(pages, config)
    rate_o = len(pages) / seconds
    print(f"(o) original method (one reused page, file://, full-page shot): {rate_o:6.2f} renders/s  "
          f"({ok}/{len(pages)} ok, {seconds:.1f} s)")
    seconds, ok = original_method(pages, config, stylesheet=False)
    rate_o_bare = len(pages) / seconds
    print(f"(o') the same with the stylesheet blocked too (unstyled, as offline): {rate_o_bare:6.2f} renders/s  "
          f"({ok}/{len(pages)} ok, {seconds:.1f} s)")

    baseline_pages = pages[: args.baseline_limit] if args.baseline_limit else pages
    seconds, ok = new_browser_per_render(baseline_pages, config)
    rate_a = len(baseline_pages) / seconds
    print(f"(a) new browser per render       : {rate_a:6.2f} renders/s  ({ok}/{len(baseline_pages)} ok, {seconds:.1f} s)")

    seconds, ok, startup = pooled(pages, config)
    rate_b = len(pages) / seconds
    print(f"(b) pooled renderer (default)    : {rate_b:6.2f} renders/s  ({ok}/{len(pages)} ok, {seconds:.1f} s; "
          f"browser start {startup:.1f} s, once)")

    latency, ok = pooled_latency(pages, config, args.pause)
    print(f"(b') pooled, caller busy {args.pause:g} s between renders: {latency * 1000:6.0f} ms per render "
          f"= {1 / latency:6.2f} renders/s of waiting  ({ok}/{len(pages)} ok)")

    seconds, ok, _ = pooled(pages, RenderConfig(tailwind="full"))
    rate_c = len(pages) / seconds
    print(f"(c) pooled renderer, full CSS    : {rate_c:6.2f} renders/s  ({ok}/{len(pages)} ok, {seconds:.1f} s)")
    if args.workers > 1:
        seconds, ok, _ = pooled(pages, config, workers=args.workers)
        rate_d = len(pages) / seconds
        print(f"(d) pooled renderer, {args.workers} workers : {rate_d:6.2f} renders/s  "
              f"({ok}/{len(pages)} ok, {seconds:.1f} s)")
    seconds, ok = fresh_context_floor(args.limit, args.workers)
    rate_e = len(pages) / seconds
    print(f"(e) floor, {args.workers} workers: a fresh context per page and nothing else: {rate_e:6.2f} renders/s  "
          f"({ok}/{len(pages)} ok, {seconds:.1f} s)")
    ratios = f"ratio (b)/(a): {rate_b / rate_a:.1f}x   (b')/(a): {1 / latency / rate_a:.1f}x   (c)/(a): {rate_c / rate_a:.1f}x"
    if args.workers > 1:
        ratios += f"   (d)/(a): {rate_d / rate_a:.1f}x"
    print(ratios + f"   (e)/(a): {rate_e / rate_a:.1f}x (the best any fresh-context renderer could do here)")
    ours = rate_d if args.workers > 1 else rate_b
    label = f"(d), {args.workers} workers" if args.workers > 1 else "(b), 1 worker"
    print(f"against the original method (o): (b) {rate_b / rate_o:.2f}x, (c) {rate_c / rate_o:.2f}x, "
          f"{label} {ours / rate_o:.2f}x, (e) {rate_e / rate_o:.2f}x")
    print(f"(against the unstyled (o'): {label} {ours / rate_o_bare:.2f}x)")
    print(f"ratio vs original method: {ours / rate_o:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
