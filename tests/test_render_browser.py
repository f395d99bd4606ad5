"""The locked-down renderer against real ColBench pages and hostile HTML (needs Chromium)."""

from __future__ import annotations

import io
import json
import os
import threading
import time

import numpy as np
import pytest

from colbench_gym.rendering import (
    AssetsMissingError,
    RenderConfig,
    Renderer,
    RendererUnavailable,
    shared_renderer,
)

pytestmark = pytest.mark.browser

GREEN_500 = "rgb(16, 185, 129)"


def _renderer(config: RenderConfig | None = None, workers: int = 1) -> Renderer:
    try:
        return Renderer(config, workers=workers)
    except (AssetsMissingError, RendererUnavailable, ImportError) as err:
        pytest.skip(f"renderer not set up: {err}")


@pytest.fixture(scope="module")
def renderer() -> Renderer:
    try:
        return shared_renderer()
    except (AssetsMissingError, RendererUnavailable, ImportError) as err:
        pytest.skip(f"renderer not set up: {err}")


@pytest.fixture(scope="module")
def real_rows(colbench_data) -> list[dict]:
    with open(colbench_data / "frontend_dev.jsonl", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def pixels(png: bytes) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))


def test_real_page_renders_offline_with_tailwind(renderer, real_rows):
    html = real_rows[0]["ground_truth"]
    assert 'class="bg-green-500' in html and "tailwindcss@2.2.19" in html
    result = renderer.render(html)
    assert result.ok, result.error
    assert result.served.get("tailwind") == 1 and result.blocked_requests == 0
    # The header's computed background is Tailwind's green-500: the stylesheet was applied.
    header = next(block for block in result.dom["blocks"] if block["tag"] == "header")
    assert header["background"] == GREEN_500
    assert any(t["text"] == "Healthcare Provider" and t["font_size"] == 30 for t in result.dom["texts"])  # text-3xl
    image = pixels(result.png)
    assert image.shape == (result.height, 1280, 3)
    y, x = header["y"] + header["h"] // 2, header["x"] + header["w"] - 5
    assert tuple(image[y, x]) == (16, 185, 129)


def test_sample_of_real_rows_all_render(renderer, real_rows):
    for row in real_rows[:12]:
        result = renderer.render(row["ground_truth"])
        assert result.ok, result.error
        assert result.served.get("tailwind") == 1
        if "picsum.photos" in row["ground_truth"]:
            assert result.served.get("image", 0) >= 1


def test_tailwind_play_cdn_pages_get_the_same_stylesheet(renderer):
    page = ('<html><head><script src="https://cdn.tailwindcss.com"></script>'
            "<script>tailwind.config = {theme: {}}</script></head>"
            '<body class="bg-red-500"><h1 class="text-3xl p-8">Play CDN</h1></body></html>')
    result = renderer.render(page)
    assert result.ok and result.served.get("tailwind_play") == 1 and result.blocked_requests == 0
    assert result.dom["background"] == "rgb(239, 68, 68)"
    assert result.dom["texts"][0]["font_size"] == 30


@pytest.mark.slow
def test_all_real_rows_render(renderer, real_rows):
    statuses = [renderer.render(row["ground_truth"]) for row in real_rows]
    assert [r.status for r in statuses] == ["ok"] * len(real_rows)
    assert all(r.served.get("tailwind") == 1 for r in statuses)


def test_same_page_same_pixels(renderer, real_rows):
    html = real_rows[1]["ground_truth"]
    first, second = renderer.render(html), renderer.render(html)
    assert first.ok and second.ok
    assert np.array_equal(pixels(first.png), pixels(second.png))
    assert first.dom == second.dom
    random_page = "<div id=o></div><script>document.getElementById('o').textContent = Math.random()</script>"
    a, b = renderer.render(random_page), renderer.render(random_page)
    assert a.dom["texts"] == b.dom["texts"]


def test_clock_and_random_values_are_the_same_on_every_render(renderer):
    page = ("<p id=t></p><script>document.getElementById('t').textContent = [new Date().getFullYear(), Date.now(),"
            " Date(), crypto.randomUUID(), crypto.getRandomValues(new Uint32Array(2)).join('.')].join(' | ')</script>")
    first, second = renderer.render(page), renderer.render(page)
    assert first.ok and second.ok and np.array_equal(pixels(first.png), pixels(second.png))
    text = first.dom["texts"][0]["text"]
    assert text == second.dom["texts"][0]["text"] and text.startswith("2025 | 1735732800000 | ")


def test_lazy_images_load_before_the_screenshot(renderer):
    cards = "".join(f"<img loading=lazy src='https://picsum.photos/id/{i}/600/{300 + i}' style='display:block'>"
                    for i in range(12))
    page = f"<body style='margin:0'><div style='height:1500px'></div>{cards}</body>"
    results = [renderer.render(page) for _ in range(3)]
    assert all(r.ok for r in results) and {r.page_height for r in results} == {1500 + sum(300 + i for i in range(12))}
    assert all(np.array_equal(pixels(results[0].png), pixels(r.png)) for r in results[1:])


@pytest.mark.parametrize("hostile", [
    "<form><input type=number name=children><input name=tagName><input name=parentElement></form>",
    "<img name=body><img name=querySelectorAll><form name=fonts></form>",
    "<script>Array.prototype.push = () => { throw new Error('no'); }; window.Map = null; window.Set = null;"
    " window.getComputedStyle = () => ({}); String.prototype.slice = () => 'made up';</script>",
])
def test_page_scripts_and_named_elements_cannot_break_the_dom_summary(renderer, hostile):
    result = renderer.render(f"<html><body><h1>Book a room</h1>{hostile}<p>Children and adults</p></body></html>")
    assert result.ok, result.error
    texts = [block["text"] for block in result.dom["texts"]]
    assert "Book a room" in texts and "made up" not in " ".join(texts)
    assert result.dom["counts"]["headings"] == 1


def test_text_written_by_scripts_is_valid_unicode(renderer):
    result = renderer.render("<p id=t></p><script>document.getElementById('t').textContent = 'Buy \\uD800 now';"
                             "document.title = 'odd \\uDC00'</script>")
    assert result.ok and result.dom["texts"][0]["text"] == "Buy \ufffd now" and result.dom["title"] == "odd \ufffd"
    json.dumps(result.dom, ensure_ascii=False).encode("utf-8")  # savable as it is


@pytest.mark.parametrize("script", ["location.href = 'https://elsewhere.example.com/'",
                                    "document.write('<form id=f action=/next></form>'); document.getElementById('f').submit()"])
def test_a_page_that_navigates_away_is_an_error_not_a_blank_page(renderer, script):
    result = renderer.render(f"<p>here</p><script>{script}</script>")
    assert result.status == "error" and result.png is None and "navigated away" in result.error
    assert renderer.render("<p>next</p>").ok


def test_trimmed_tailwind_renders_like_the_full_stylesheet(renderer, real_rows):
    full = _renderer(RenderConfig(tailwind="full", dom_summary=False))
    try:
        for row in real_rows[:4]:
            trimmed, whole = renderer.render(row["ground_truth"]), full.render(row["ground_truth"])
            assert trimmed.ok and whole.ok
            assert np.array_equal(pixels(trimmed.png), pixels(whole.png))
    finally:
        full.close()


HOSTILE = """<html><head>
<link rel="stylesheet" href="https://fonts.googleapis.com/css?family=Roboto">
<script src="https://evil.example.com/x.js"></script>
<link href="https://cdn.jsdelivr.net/npm/tailwindcss@2.2.19/dist/tailwind.min.css" rel="stylesheet">
</head><body class="bg-blue-500">
<img src="https://evil.example.com/pixel.png" alt="">
<iframe src="https://evil.example.com/frame"></iframe>
<p id="log">log</p>
<script>
const out = document.getElementById('log'); const log = (m) => { out.textContent += ' ' + m; };
fetch('https://evil.example.com/api').then(() => log('fetch-ok')).catch(() => log('fetch-blocked'));
const xhr = new XMLHttpRequest(); xhr.open('GET', 'http://10.0.0.1/x'); xhr.onerror = () => log('xhr-blocked');
xhr.onload = () => log('xhr-ok'); xhr.send();
try { const ws = new WebSocket('ws://127.0.0.1:8765/');
      ws.onopen = () => log('ws-open'); ws.onclose = () => log('ws-closed'); } catch (e) { log('ws-throw'); }
navigator.serviceWorker.register('/sw.js').then(() => log('sw-ok')).catch(() => log('sw-blocked'));
</script></body></html>"""


def test_external_requests_are_blocked_and_counted(renderer):
    result = renderer.render(HOSTILE)
    assert result.ok, result.error
    log = next(t["text"] for t in result.dom["texts"] if t["text"].startswith("log"))
    assert "fetch-blocked" in log and "sw-blocked" in log and "ws-closed" in log and "xhr-blocked" in log, log
    assert not any(word in log for word in ("fetch-ok", "xhr-ok", "ws-open", "sw-ok"))
    blocked = " ".join(result.blocked_urls)
    for url in ("fonts.googleapis.com", "evil.example.com/x.js", "evil.example.com/pixel.png",
                "evil.example.com/frame", "evil.example.com/api", "10.0.0.1", "ws://127.0.0.1:8765", "service-worker:"):
        assert url in blocked, url
    assert result.blocked_requests == len(result.blocked_urls) == 8
    assert result.served["tailwind"] == 1  # the allowed stylesheet still applies
    assert result.dom["background"] == "rgb(59, 130, 246)"


def test_local_files_cannot_be_read(renderer, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-4242")
    url = secret.as_uri()
    page = f"""<p id=log>log</p><img src="{url}" onerror="document.getElementById('log').textContent += ' img-failed'">
<iframe id=f src="{url}"></iframe>
<script>
const log = (m) => document.getElementById('log').textContent += ' ' + m;
fetch('{url}').then(r => r.text()).then(t => log('read:' + t)).catch(() => log('fetch-failed'));
window.addEventListener('load', () => {{
  try {{ const body = document.getElementById('f').contentDocument.body;
        log('frame-text:' + (body.innerText || 'none')); }}
  catch (e) {{ log('frame-text:denied'); }}
}});
</script>"""
    result = renderer.render(page)
    assert result.ok, result.error
    text = " ".join(t["text"] for t in result.dom["texts"])
    assert "TOP-SECRET" not in text
    # The iframe stays empty (or cross-origin): either way the page cannot see the file.
    assert "img-failed" in text and "fetch-failed" in text, text
    assert "frame-text:none" in text or "frame-text:denied" in text, text


def test_infinite_loop_is_killed_at_the_deadline_and_the_next_render_works(real_rows):
    renderer = _renderer(RenderConfig(dom_summary=False))
    deadline = 2.0  # for the hanging pages only: ordinary pages keep the default, so a loaded machine cannot fail them
    try:
        before = renderer.render(real_rows[2]["ground_truth"])
        assert before.ok
        # The loop starts after `load`: Playwright's own timeouts cannot interrupt page.evaluate,
        # only the outer deadline (killing the worker's process tree) ends it.
        hang = "<p>x</p><script>addEventListener('load', () => setTimeout(() => { for (;;) {} }, 0))</script>"
        started = time.monotonic()
        result = renderer.render(hang, timeout=deadline)
        assert result.status == "timeout" and result.png is None
        assert time.monotonic() - started < deadline + 2.0
        after = renderer.render(real_rows[2]["ground_truth"])
        assert after.ok and renderer.restarts == 1
        assert np.array_equal(pixels(before.png), pixels(after.png))  # same pixels on a new browser
        blocking = renderer.render("<script>while (true) {}</script>", timeout=deadline)
        assert blocking.status == "timeout" and blocking.png is None
        assert renderer.render("<p>fine</p>").ok
    finally:
        renderer.close()


def test_memory_bomb_crashes_only_its_own_page(renderer):
    result = renderer.render("<script>const a = []; while (true) a.push(new Array(1e6).fill(1.5));</script>")
    assert result.status in ("error", "crashed", "timeout") and result.png is None
    assert renderer.render("<p>still fine</p>").ok


def test_browser_crash_between_renders_is_recovered(real_rows):
    renderer = _renderer(RenderConfig(dom_summary=False))
    try:
        assert renderer.render("<p>one</p>").ok
        worker = renderer._workers[0]
        os.killpg(worker.process_groups[0], 9)  # the Chromium process group dies
        time.sleep(0.5)
        result = renderer.render("<p>two</p>")
        assert result.ok, result.error
        assert renderer.restarts == 1
    finally:
        renderer.close()


def test_a_lone_surrogate_is_replaced_not_fatal(renderer):
    # Not encodable as UTF-8: the page is sent with a replacement character instead of never arriving.
    result = renderer.render("<html><body><p>odd \ud800 text</p></body></html>")
    assert result.ok and result.seconds < 5
    assert any("odd ? text" in block.get("text", "") for block in result.dom["texts"])


def test_oversized_page_is_refused_before_the_browser(renderer):
    started = time.monotonic()
    result = renderer.render("<p>" + "x" * 10_000_000 + "</p>")
    assert result.status == "refused" and result.png is None and "limit" in result.error
    assert time.monotonic() - started < 1.0


def test_very_tall_page_is_clipped(renderer):
    result = renderer.render("<div style='height:100000px;background:linear-gradient(#f00,#00f)'>tall</div>")
    assert result.ok, result.error
    assert result.clipped and result.page_height >= 100_000
    assert result.height == renderer.config.max_height
    assert pixels(result.png).shape == (renderer.config.max_height, 1280, 3)


def test_renderer_is_usable_from_many_threads(real_rows):
    renderer = _renderer(RenderConfig(dom_summary=False), workers=2)
    pages = [row["ground_truth"] for row in real_rows[3:5]]
    results: dict[int, bytes] = {}
    try:
        def work(index: int) -> None:
            result = renderer.render(pages[index % 2])
            assert result.ok, result.error
            results[index] = result.png

        threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(results) == 4
        assert np.array_equal(pixels(results[0]), pixels(results[2]))
        assert np.array_equal(pixels(results[1]), pixels(results[3]))
        assert [r.ok for r in renderer.render_many(pages)] == [True, True]
    finally:
        renderer.close()
