"""Renderer pieces that need no browser: URL routing, Tailwind trimming, assets, framing."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import tarfile

import pytest

from colbench_gym.rendering import assets, protocol
from colbench_gym.rendering.routing import PAGE_URL, classify
from colbench_gym.rendering.tailwind import (
    TailwindPurger,
    content_tokens,
    selector_classes,
)


@pytest.mark.parametrize(
    ("url", "kind", "size"),
    [
        (PAGE_URL, "page", None),
        ("https://cdn.jsdelivr.net/npm/tailwindcss@2.2.19/dist/tailwind.min.css", "tailwind", None),
        ("https://unpkg.com/tailwindcss@^2/dist/tailwind.min.css", "tailwind", None),
        ("https://cdnjs.cloudflare.com/ajax/libs/tailwindcss/2.2.19/tailwind.min.css", "tailwind", None),
        ("https://cdn.tailwindcss.com", "tailwind_play", None),
        ("https://cdn.tailwindcss.com/3.4.1?plugins=forms", "tailwind_play", None),
        ("https://picsum.photos/id/48/1200/400", "image", (1200, 400)),
        ("https://picsum.photos/300", "image", (300, 300)),
        ("https://picsum.photos/seed/abc/640/480?grayscale", "image", (640, 480)),
        ("https://source.unsplash.com/random/800x600", "image", (800, 600)),
        ("https://images.unsplash.com/photo-1?w=500&h=200", "image", (500, 200)),
        ("https://via.placeholder.com/150x50", "image", (150, 50)),
        ("https://placehold.co/64", "image", (64, 64)),
        ("https://fonts.googleapis.com/css?family=Roboto", "blocked", None),
        ("https://evil.example.com/tracker.js", "blocked", None),
        ("http://127.0.0.1:8000/", "blocked", None),
        ("file:///etc/passwd", "blocked", None),
        ("ws://example.com/socket", "blocked", None),
        ("data:text/plain,hi", "blocked", None),
    ],
)
def test_routing(url, kind, size):
    route = classify(url)
    assert route.kind == kind
    if size:
        assert (route.width, route.height) == size


def test_selector_classes_unescape_tailwind_names():
    assert selector_classes(r".md\:w-1\/2:hover") == {"md:w-1/2"}
    assert selector_classes(r".\32xl\:container") == {"2xl:container"}
    assert selector_classes(r".group:hover .group-hover\:text-white") == {"group", "group-hover:text-white"}
    assert selector_classes(".space-x-4>:not([hidden])~:not([hidden])") == {"space-x-4"}
    assert selector_classes(r'a[href$=".pdf"]') == frozenset()
    assert selector_classes(r".py-0\.5") == {"py-0.5"}


def test_content_tokens_cover_attributes_and_scripts():
    html = """<div class="md:w-1/2 bg-blue-500" id=x class=p-4><script>el.classList.add('hidden','text-red-500')</script>"""
    tokens = content_tokens(html)
    assert {"md:w-1/2", "bg-blue-500", "p-4", "hidden", "text-red-500"} <= tokens


SAMPLE_CSS = (
    "/*! tailwindcss v2.2.19 | MIT License */*,::before{box-sizing:border-box}"
    ".a{color:red}.b,.c{color:blue}.d .e{color:green}"
    "@media (min-width:640px){.sm\\:a{color:red}.f{color:pink}}"
    "@keyframes spin{to{transform:rotate(360deg)}}"
    ".content-\\[\\'\\'\\]{content:'}{'}"
)


def test_purger_keeps_only_used_rules_in_order():
    purger = TailwindPurger(SAMPLE_CSS)
    out = purger.purge('<p class="sm:a c">')
    assert out.startswith("/*! tailwindcss")
    assert "*,::before{box-sizing:border-box}" in out  # class-free rules always stay
    assert ".a{" not in out and ".d .e" not in out and ".f{" not in out
    assert ".c{color:blue}" in out and ".b" not in out  # only the surviving selector of a list
    assert "@media (min-width:640px){.sm\\:a{color:red}}" in out
    assert "@keyframes spin" in out
    assert out.index("box-sizing") < out.index(".c{") < out.index("@media")


def test_purger_on_real_tailwind(tmp_path):
    try:
        css = assets.load_tailwind_css()
    except assets.AssetsMissingError:
        pytest.skip("Tailwind CSS not installed (python -m colbench_gym.rendering.assets --fetch)")
    purger = TailwindPurger(css)
    assert purger.rule_count > 30_000
    out = purger.purge('<header class="bg-green-500 md:flex hover:text-white w-1/2">')
    assert len(out) < 20_000
    assert ".bg-green-500{" in out and "background-color:rgba(16,185,129" in out
    assert ".md\\:flex{display:flex}" in out and ".w-1\\/2{width:50%}" in out
    assert ".bg-red-500" not in out


def _fake_tarball(css: bytes) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        info = tarfile.TarInfo(assets.TAILWIND_MEMBER)
        info.size = len(css)
        archive.addfile(info, io.BytesIO(css))
    return buffer.getvalue()


def test_tailwind_install_checks_integrity(tmp_path, monkeypatch):
    tarball = _fake_tarball(b"/*! tailwindcss v2.2.19 */ .x{}")
    with pytest.raises(ValueError, match="sha512"):
        assets.install_tailwind_from_tarball(tarball, tmp_path)
    digest = base64.b64encode(hashlib.sha512(tarball).digest()).decode()
    monkeypatch.setattr(assets, "TAILWIND_TARBALL_SHA512", digest)
    path = assets.install_tailwind_from_tarball(tarball, tmp_path)
    assert path == tmp_path / assets.TAILWIND_FILENAME
    assert assets.load_tailwind_css(tmp_path).endswith(b".x{}")


def test_missing_tailwind_names_the_setup_command(tmp_path, monkeypatch):
    monkeypatch.setenv("COLBENCH_CACHE", str(tmp_path))
    assert assets.cache_dir() == tmp_path / "assets"
    with pytest.raises(assets.AssetsMissingError, match="python -m colbench_gym.rendering.assets --fetch"):
        assets.load_tailwind_css()
    from colbench_gym.rendering import Renderer

    with pytest.raises(assets.AssetsMissingError, match="--fetch"):
        Renderer()


def test_missing_chromium_is_a_clear_error(monkeypatch):
    from colbench_gym.rendering import RendererUnavailable, find_chromium

    monkeypatch.setenv("COLBENCH_CHROMIUM", "/nonexistent/chrome")
    with pytest.raises(RendererUnavailable, match="COLBENCH_CHROMIUM"):
        find_chromium()


def test_the_headless_shell_is_preferred_to_the_full_browser(monkeypatch, tmp_path):
    from colbench_gym.rendering import renderer

    def executable(name):
        path = tmp_path / name
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
        return str(path)

    assert "headless-shell" in renderer.DEFAULT_CHROMIUM_PATHS[0]  # the system's shell comes first
    full, shell = executable("chromium"), executable("chromium-headless-shell")
    monkeypatch.delenv("COLBENCH_CHROMIUM", raising=False)
    monkeypatch.setattr(renderer, "DEFAULT_CHROMIUM_PATHS", (str(tmp_path / "missing"), shell, full))
    assert renderer.find_chromium() == shell
    monkeypatch.setattr(renderer, "DEFAULT_CHROMIUM_PATHS", (full,))
    assert renderer.find_chromium() == full  # the full browser when there is no shell
    monkeypatch.setenv("COLBENCH_CHROMIUM", full)
    monkeypatch.setattr(renderer, "DEFAULT_CHROMIUM_PATHS", (shell,))
    assert renderer.find_chromium() == full  # an explicit choice wins


def test_placeholder_is_deterministic_and_sized():
    from PIL import Image

    png = assets.placeholder_png(320, 180)
    assert png == assets.placeholder_png.__wrapped__(320, 180)
    image = Image.open(io.BytesIO(png))
    assert image.size == (320, 180)
    assert Image.open(io.BytesIO(assets.placeholder_png(10**6, 5))).size == (assets.MAX_PLACEHOLDER_SIDE, 5)
    import numpy as np

    colours = np.unique(np.asarray(image.convert("RGB")).reshape(-1, 3), axis=0)
    assert len(colours) > 10  # a picture, not a flat fill


def test_framing_roundtrip_and_deadline():
    read_fd, write_fd = os.pipe()
    try:
        protocol.send(write_fd, {"status": "ok", "text": "é"}, b"\x89PNG")
        header, payload = protocol.receive(read_fd, deadline=None)
        assert header["status"] == "ok" and header["text"] == "é" and payload == b"\x89PNG"
        import time

        with pytest.raises(protocol.DeadlineExceeded):
            protocol.receive(read_fd, deadline=time.monotonic() + 0.05)
        os.close(write_fd)
        write_fd = -1
        with pytest.raises(protocol.ChannelClosed):
            protocol.receive(read_fd, deadline=time.monotonic() + 1)
    finally:
        os.close(read_fd)
        if write_fd >= 0:
            os.close(write_fd)


def test_render_result_without_image_cannot_be_scored():
    from colbench_gym.rendering import RenderResult

    result = RenderResult("timeout", error="slow")
    assert not result.ok
    with pytest.raises(ValueError, match="timeout"):
        result.image()
    assert json.dumps(result.summary())


@pytest.mark.parametrize("url", ["https://picsum.photos/" + "9" * 5000, "https://dummyimage.com/" + "1" * 6000 + "x5",
                                 "https://placehold.co/\u00b2\u00b2", "https://images.unsplash.com/p?w=" + "7" * 5000])
def test_image_urls_with_absurd_numbers_get_the_default_size(url):
    assert classify(url).kind == "image" and (classify(url).width, classify(url).height) == (400, 300)
