"""What the locked-down browser does with each URL a page asks for.

Nothing reaches the network. Every request is one of:

* the page itself (``PAGE_URL``), served from memory;
* a Tailwind stylesheet on a CDN (jsDelivr, unpkg, cdnjs; any version) -> the local Tailwind 2.2.19 CSS;
* the Tailwind Play CDN script (``cdn.tailwindcss.com``) -> a script that injects the same CSS as a
  ``<style>`` element. Limitation: Play CDN pages are Tailwind 3 (JIT); utilities that exist only in
  v3 (arbitrary values such as ``w-[300px]``, ``aspect-video``) are not styled;
* a placeholder-image service (picsum.photos, unsplash, placehold.co, via.placeholder.com,
  placekitten, dummyimage) -> a deterministic local picture at the requested size;
* anything else (other scripts, fonts, fetch/XHR, iframes, WebSockets, ``file://``) -> blocked and counted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

# A reserved TLD (RFC 2606) that can never resolve: the page's origin in the browser.
PAGE_URL = "https://page.colbench.invalid/"
DEFAULT_IMAGE_SIZE = (400, 300)

_TAILWIND_CSS = re.compile(r"tailwind(css)?[^/]*/.*\.css$|/tailwind(\.min)?\.css$", re.IGNORECASE)
_SIZE_PAIR = re.compile(r"(?<![0-9])([0-9]{1,5})\s*[xX×]\s*([0-9]{1,5})(?![0-9])")
_SIZE = re.compile(r"[0-9]{1,5}")
_IMAGE_HOSTS = (
    "picsum.photos", "source.unsplash.com", "images.unsplash.com", "placehold.co", "placehold.it",
    "via.placeholder.com", "placekitten.com", "dummyimage.com", "loremflickr.com", "placeimg.com",
)


@dataclass(frozen=True)
class Route:
    """``kind`` is ``page``, ``tailwind``, ``tailwind_play``, ``image`` or ``blocked``."""

    kind: str
    width: int = 0
    height: int = 0


def _number(text: str) -> int | None:
    """A size written in a URL: ASCII digits only, at most 5 of them (larger sizes are capped anyway)."""
    return int(text) if _SIZE.fullmatch(text) else None


def _image_size(host: str, path: str, query: str) -> tuple[int, int]:
    numbers = [n for n in map(_number, path.split("/")) if n is not None]
    if host == "picsum.photos":
        # /W, /W/H, /id/N/W/H, /seed/S/W/H
        parts = [p for p in path.split("/") if p]
        if len(parts) >= 2 and parts[0] in ("id", "seed"):
            numbers = [n for n in map(_number, parts[2:4]) if n is not None]
        if len(numbers) == 1:
            return numbers[0], numbers[0]
        if len(numbers) >= 2:
            return numbers[0], numbers[1]
    pair = _SIZE_PAIR.search(path)
    if pair:
        return int(pair.group(1)), int(pair.group(2))
    params = parse_qs(query)
    width = _number(params.get("w", params.get("width", [""]))[0])
    height = _number(params.get("h", params.get("height", [""]))[0])
    if width is not None and height is not None:
        return width, height
    if width is not None:
        return width, width * DEFAULT_IMAGE_SIZE[1] // DEFAULT_IMAGE_SIZE[0]
    if len(numbers) >= 2:
        return numbers[-2], numbers[-1]
    if len(numbers) == 1 and host in ("placehold.co", "via.placeholder.com", "placehold.it", "dummyimage.com"):
        return numbers[0], numbers[0]
    return DEFAULT_IMAGE_SIZE


def classify(url: str) -> Route:
    """Decide what happens to a request for ``url`` (pure function, no I/O)."""
    if url == PAGE_URL:
        return Route("page")
    try:
        parts = urlsplit(url)
    except ValueError:
        return Route("blocked")
    if parts.scheme not in ("http", "https"):
        return Route("blocked")
    host = (parts.hostname or "").lower()
    if host == "cdn.tailwindcss.com":
        return Route("tailwind_play")
    if _TAILWIND_CSS.search(parts.path):
        return Route("tailwind")
    if host in _IMAGE_HOSTS or any(host.endswith("." + h) for h in _IMAGE_HOSTS):
        width, height = _image_size(host, parts.path, parts.query)
        return Route("image", max(width, 1), max(height, 1))
    return Route("blocked")
