"""A simulated human for frontend tasks who *sees* both pages, without any model.

The human has the target page in mind and looks at the agent's latest page. Each turn the
environment hands over both screenshots and both DOM summaries (``request.extra["agent_dom"]`` and
``["target_dom"]``, from :mod:`colbench_gym.rendering`); this simulator lists what differs and
says the most salient points in a few plain sentences (at most ``max_chars`` characters):

* page and section colours (the header is green, not blue), and the colours that cover much of
  one page but not the other (from the pixels);
* sections present in one page only (navigation bar, footer, sidebar, form, table);
* text: headings and passages the target has and the agent's page lacks, text that should not be
  there, and headings that should be larger, bolder, centred or another colour (texts are matched
  by their words in any script; Chinese, Japanese, Thai and other scripts written without spaces
  by their character pairs);
* layout: columns side by side versus stacked, images missing or extra, page length (positions are
  fractions of the browser window's width, read from the screenshot, not of the scrollable width).

Each difference gets a salience (how much of the picture it changes, how prominent the text is);
the top ones are said, most salient first. Without an agent page (the agent asked a question) the
human describes the most salient parts of the target instead. Deterministic: the same two pages
always get the same answer.
"""

from __future__ import annotations

import colorsys
import functools
import io
import re
import unicodedata
from dataclasses import dataclass
from typing import Any

from colbench_gym.simulators.base import SimulatorReply, SimulatorRequest

MAX_REPLY_CHARS = 1000
RGB = tuple[int, int, int]
_SECTION_TAGS = {"header": "header", "nav": "navigation bar", "footer": "footer", "aside": "sidebar",
                 "form": "form", "table": "table"}


@dataclass(frozen=True, order=True)
class Difference:
    """One thing the human noticed; ``salience`` in [0, 1] orders what is said first."""

    salience: float
    sentence: str
    kind: str = ""


# -- colours -------------------------------------------------------------------------------------

def parse_colour(text: str | None) -> RGB | None:
    """``"rgb(16, 185, 129)"`` / ``"rgba(…, a)"`` -> ``(16, 185, 129)``; None when transparent or unknown."""
    if not text:
        return None
    numbers = re.findall(r"[\d.]+", text)
    if len(numbers) < 3:
        return None
    if len(numbers) >= 4 and float(numbers[3]) == 0:
        return None
    return tuple(round(float(n)) for n in numbers[:3])  # type: ignore[return-value]


def colour_distance(a: RGB, b: RGB) -> float:
    """Perceptual-ish RGB distance ("redmean" weighting), 0..~765."""
    mean_red = (a[0] + b[0]) / 2
    dr, dg, db = a[0] - b[0], a[1] - b[1], a[2] - b[2]
    return ((2 + mean_red / 256) * dr * dr + 4 * dg * dg + (2 + (255 - mean_red) / 256) * db * db) ** 0.5


def colour_name(rgb: RGB) -> str:
    """A plain name a person would use: "white", "light gray", "dark blue", "green", "pink"…"""
    r, g, b = (c / 255 for c in rgb)
    hue, lightness, _ = colorsys.rgb_to_hls(r, g, b)
    chroma = max(r, g, b) - min(r, g, b)
    # Very dark or very faint colours read as black, gray or white; pale tints keep their hue.
    if chroma < 0.06 or (chroma < 0.12 and lightness < 0.5):
        if lightness >= 0.985:
            return "white"
        if lightness >= 0.85:
            return "light gray"
        if lightness >= 0.55:
            return "gray"
        if lightness >= 0.15:
            return "dark gray"
        return "black"
    degrees = hue * 360
    names = [(15, "red"), (40, "orange"), (65, "yellow"), (165, "green"), (190, "teal"), (250, "blue"),
             (275, "indigo"), (300, "purple"), (345, "pink"), (361, "red")]
    name = next(label for limit, label in names if degrees < limit)
    luminance = 0.2126 * r + 0.7152 * g + 0.0722 * b  # how bright it looks, not the HLS lightness
    if name == "orange" and luminance < 0.3:
        name = "brown"
    if luminance >= 0.8:
        return f"light {name}"
    if luminance <= 0.25:
        return f"dark {name}"
    return name


def _different(a: RGB | None, b: RGB | None, threshold: float = 60.0) -> bool:
    if a is None or b is None:
        return a != b
    return colour_distance(a, b) > threshold and colour_name(a) != colour_name(b)


# -- text ----------------------------------------------------------------------------------------

# Scripts written without spaces between words (Chinese, Japanese, Thai, Lao, Khmer, Myanmar):
# each run of their characters counts as its overlapping character bigrams instead of one word.
_UNSPACED = ("\u0e00-\u0eff"  # Thai, Lao
             "\u1000-\u109f"  # Myanmar
             "\u1780-\u17ff\u19e0-\u19ff"  # Khmer
             "\u3040-\u30ff\u31f0-\u31ff\uff66-\uff9f"  # Hiragana, Katakana
             "\u3005\u3006\u3100-\u312f\u31a0-\u31bf"  # ideographic iteration marks, Bopomofo
             "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f")  # CJK ideographs
_UNSPACED_PIECES = re.compile(f"[{_UNSPACED}]+|[^{_UNSPACED}]+")
_UNSPACED_RUN = re.compile(f"[{_UNSPACED}]+")


def _word_runs(text: str) -> list[str]:
    """Runs of letters and digits of any script, with their combining marks (Arabic vowels, Hindi
    vowel signs), which ``\\w`` alone would split words at."""
    runs: list[str] = []
    current: list[str] = []
    for char in text:
        if char.isalnum() or (current and unicodedata.category(char).startswith("M")):
            current.append(char)
        elif current:
            runs.append("".join(current))
            current = []
    if current:
        runs.append("".join(current))
    return runs


@functools.lru_cache(maxsize=8192)
def _words(text: str) -> frozenset[str]:
    """The word tokens of a text, in any script (case- and width-folded, NFKC)."""
    tokens: set[str] = set()
    for run in _word_runs(unicodedata.normalize("NFKC", text).casefold()):
        for piece in _UNSPACED_PIECES.findall(run):
            if _UNSPACED_RUN.fullmatch(piece) and len(piece) > 1:
                tokens.update(piece[i:i + 2] for i in range(len(piece) - 1))
            else:
                tokens.add(piece)
    return frozenset(tokens)


def _overlap(a: str, b: str) -> float:
    wa, wb = _words(a), _words(b)
    if not wa or not wb:
        return 0.0
    return len(wa & wb) / len(wa | wb)


def _columns(char: str) -> int:
    """Display width: East Asian wide and full-width characters take two columns, accents none."""
    if unicodedata.category(char) in ("Mn", "Me"):
        return 0
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def _quote(text: str, limit: int = 60) -> str:
    """``text`` in quotes, cut to about ``limit`` columns: at a space when one falls in the second half
    of the budget, else (text without spaces, one long word) at the budget itself, never between a
    letter and its combining marks."""
    text = " ".join(text.split())
    used, end = 0, 0
    while end < len(text) and used + _columns(text[end]) <= limit:
        used += _columns(text[end])
        end += 1
    if end == len(text):
        return f'"{text}"'
    space = text.rfind(" ", 0, end + 1)
    if space > 0 and used - sum(map(_columns, text[space:end])) >= limit // 2:
        end = space
    else:
        while end > 1 and unicodedata.category(text[end]).startswith("M"):
            end -= 1
    return f'"{text[:end].rstrip()}…"'


def _is_heading(block: dict[str, Any]) -> bool:
    return block.get("tag", "") in ("h1", "h2", "h3") or block.get("font_size", 16) >= 22


# -- pixels --------------------------------------------------------------------------------------

def dominant_colours(png: bytes, top: int = 6) -> list[tuple[RGB, float]]:
    """The main colours of a screenshot and the share of the page each covers."""
    from PIL import Image

    image = Image.open(io.BytesIO(png)).convert("RGB")
    image.thumbnail((160, 400))
    quantised = image.quantize(colors=12, method=Image.Quantize.MEDIANCUT)
    palette = quantised.getpalette() or []
    counts = sorted(quantised.getcolors() or [], reverse=True)
    total = sum(count for count, _ in counts) or 1
    return [(tuple(palette[3 * index:3 * index + 3]), count / total)  # type: ignore[misc]
            for count, index in counts[:top]]


def _band_colours(png: bytes, bands: int = 3, height: int = 800) -> list[RGB]:
    """The most common colour of the top, middle and bottom of the first screen."""
    import numpy as np
    from PIL import Image

    image = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))[:height]
    edges = np.linspace(0, image.shape[0], bands + 1).astype(int)
    colours: list[RGB] = []
    for i in range(bands):
        pixels = (image[edges[i]:edges[i + 1]].reshape(-1, 3) // 8).astype(np.int64)
        codes, counts = np.unique(pixels[:, 0] * 1024 + pixels[:, 1] * 32 + pixels[:, 2], return_counts=True)
        code = int(codes[np.argmax(counts)])
        colours.append((code // 1024 * 8 + 4, code // 32 % 32 * 8 + 4, code % 32 * 8 + 4))
    return colours


def viewport_width(dom: dict[str, Any], png: bytes | None, default: float = 1280.0) -> float:
    """The width of the browser window the page was laid out in, in CSS pixels.

    The screenshot is exactly the viewport wide (device scale 1), so its width comes first; then a
    ``viewport_width`` in the DOM summary; then the DOM's ``width``, the page's *scroll* width, which
    is larger than the window when something overflows (an invisible 4000px-wide strip would
    otherwise move the page's centre to x = 2000).
    """
    if png:
        from PIL import Image

        try:
            with Image.open(io.BytesIO(png)) as image:  # reads the header only
                return float(image.width)
        except (OSError, SyntaxError, ValueError, Image.DecompressionBombError):
            pass
    return float(dom.get("viewport_width") or dom.get("width") or default)


# -- the comparison ---------------------------------------------------------------------------------

class PageComparison:
    """Differences between the agent's page and the target, from DOM summaries and screenshots."""

    def __init__(self, agent_dom: dict[str, Any] | None, target_dom: dict[str, Any] | None,
                 agent_png: bytes | None = None, target_png: bytes | None = None):
        self.agent = agent_dom or {}
        self.target = target_dom or {}
        self.agent_png = agent_png
        self.target_png = target_png
        self.width = viewport_width(self.target, target_png)
        self.agent_width = viewport_width(self.agent, agent_png)
        self.target_height = float(self.target.get("height") or 800)

    def differences(self) -> list[Difference]:
        found: list[Difference] = []
        if self.target:
            found += self._page_colour()
            found += self._sections()
            found += self._texts()
            found += self._layout()
            found += self._images()
        if self.agent_png and self.target_png:
            found += self._palette(exclude=[d.sentence for d in found])
        elif self.target_png and not self.agent:
            found += self._target_colours(exclude=[d.sentence for d in found])
        return sorted(found, key=lambda d: (-d.salience, d.sentence))

    # Page background: covers everything, so it is the first thing anyone notices.
    def _page_colour(self) -> list[Difference]:
        want, have = parse_colour(self.target.get("background")), parse_colour(self.agent.get("background"))
        if self.agent and want and have and _different(want, have):
            return [Difference(0.9, f"The page background should be {colour_name(want)}, not {colour_name(have)}.",
                               "page_colour")]
        return []

    def _blocks(self, dom: dict[str, Any]) -> list[dict[str, Any]]:
        return list(dom.get("blocks") or [])

    def _role(self, block: dict[str, Any], dom: dict[str, Any]) -> str | None:
        tag = block.get("tag", "")
        if tag in _SECTION_TAGS:
            return tag
        height = float(dom.get("height") or 800)
        width = self.agent_width if dom is self.agent else self.width
        wide = block.get("w", 0) >= 0.9 * width
        if wide and block.get("own_background") and block.get("depth", 9) <= 2:
            if block.get("y", 0) <= 4 and block.get("h", 0) < 200:
                return "header"
            if block.get("y", 0) + block.get("h", 0) >= height - 4 and block.get("h", 0) < 300:
                return "footer"
        return None

    def _sections(self) -> list[Difference]:
        def roles(dom: dict[str, Any]) -> dict[str, dict[str, Any]]:
            found: dict[str, dict[str, Any]] = {}
            for block in self._blocks(dom):
                role = self._role(block, dom)
                if role and role not in found:
                    found[role] = block
            return found

        wanted, present = roles(self.target), roles(self.agent)
        out: list[Difference] = []
        for role, block in wanted.items():
            name = _SECTION_TAGS[role]
            area = min(1.0, block.get("w", 0) * block.get("h", 0) / (self.width * 800))
            colour = parse_colour(block.get("background")) if block.get("own_background") else None
            described = f"a {colour_name(colour)} {name}" if colour else f"a {name}"
            where = {"header": " at the top", "footer": " at the bottom", "aside": " on the side"}.get(role, "")
            if role not in present:
                if not self.agent:
                    out.append(Difference(0.5 + 0.3 * area, f"My page has {described}{where}.", "section"))
                else:
                    out.append(Difference(0.55 + 0.3 * area, f"My page has {described}{where}; yours has none.",
                                          "section"))
                continue
            have = present[role]
            their_colour = parse_colour(have.get("background")) if have.get("own_background") else \
                parse_colour(self.agent.get("background"))
            if colour and _different(colour, their_colour):
                out.append(Difference(0.6 + 0.35 * area, f"The {name} should be {colour_name(colour)}, "
                                      f"not {colour_name(their_colour) if their_colour else 'plain'}.", "section_colour"))
            text_colour, their_text = parse_colour(block.get("color")), parse_colour(have.get("color"))
            if block.get("text") and text_colour and _different(text_colour, their_text, 90):
                out.append(Difference(0.35, f"The text in the {name} should be {colour_name(text_colour)}.",
                                      "section_text_colour"))
        for role, block in present.items():
            if role not in wanted and role in ("nav", "aside", "form", "table", "footer"):
                out.append(Difference(0.3, f"I don't want a {_SECTION_TAGS[role]} like the one on your page.",
                                      "extra_section"))
        return out

    def _text_weight(self, block: dict[str, Any]) -> float:
        size = float(block.get("font_size") or 16)
        top_bonus = 1.0 if block.get("y", 0) < 800 else 0.6
        return min(1.0, (size / 36.0) ** 1.2 * top_bonus * (1.3 if _is_heading(block) else 1.0))

    def _texts(self) -> list[Difference]:
        wanted = [t for t in self.target.get("texts") or [] if _words(t.get("text", ""))]
        present = [t for t in self.agent.get("texts") or [] if _words(t.get("text", ""))]
        out: list[Difference] = []
        matches = self._match_texts(wanted, present)
        matched_agent = set(matches.values())
        missing_paragraphs: list[dict[str, Any]] = []
        for index, block in enumerate(wanted):
            weight = self._text_weight(block)
            if index not in matches:
                if _is_heading(block):
                    verb = "says" if not self.agent else "should say"
                    top = block.get("y", 0) < 400
                    size = float(block.get("font_size") or 16)
                    out.append(Difference(0.4 + 0.45 * min(1.0, size / 48) + 0.05 * top,
                                          f"A heading{' near the top' if top else ''} {verb} {_quote(block['text'])}.",
                                          "missing_heading"))
                else:
                    missing_paragraphs.append(block)
                continue
            out += self._text_style(block, present[matches[index]], weight)
        if missing_paragraphs and self.agent:
            first = missing_paragraphs[0]
            more = len(missing_paragraphs) - 1
            extra = f" (and {more} more passage{'s' if more > 1 else ''} of text)" if more else ""
            out.append(Difference(0.3 + 0.1 * min(1.0, len(missing_paragraphs) / 5),
                                  f"My page also has text like {_quote(first['text'], 70)}{extra} that yours lacks.",
                                  "missing_text"))
        extras = [t for index, t in enumerate(present) if index not in matched_agent
                  and max((_overlap(t["text"], w["text"]) for w in wanted), default=0.0) < 0.3]
        if extras:
            biggest = max(extras, key=self._text_weight)
            out.append(Difference(0.2 + 0.3 * self._text_weight(biggest),
                                  f"Your page shows {_quote(biggest['text'])}, which mine doesn't have.", "extra_text"))
        return out

    def _match_texts(self, wanted: list[dict[str, Any]], present: list[dict[str, Any]]) -> dict[int, int]:
        """One-to-one matching of target to agent text blocks: same words first, then same kind and place."""
        agent_width = self.agent_width
        pairs: list[tuple[float, int, int]] = []
        for i, want in enumerate(wanted):
            for j, have in enumerate(present):
                overlap = _overlap(want["text"], have["text"])
                if overlap < 0.5:
                    continue
                same_tag = want.get("tag") == have.get("tag")
                size_gap = abs(float(want.get("font_size") or 16) - float(have.get("font_size") or 16)) / 16
                dy = abs(want.get("y", 0) - have.get("y", 0)) / max(self.target_height, 800.0)
                dx = abs(want.get("x", 0) / self.width - have.get("x", 0) / agent_width)
                score = overlap + 0.3 * same_tag + 0.2 * (1 - min(1.0, size_gap)) + 0.2 * (1 - min(1.0, dx + dy))
                pairs.append((score, i, j))
        matches: dict[int, int] = {}
        used: set[int] = set()
        for _, i, j in sorted(pairs, key=lambda p: (-p[0], p[1], p[2])):
            if i not in matches and j not in used:
                matches[i] = j
                used.add(j)
        return matches

    def _text_style(self, want: dict[str, Any], have: dict[str, Any], weight: float) -> list[Difference]:
        out: list[Difference] = []
        label = _quote(want["text"], 40)
        size_w, size_h = float(want.get("font_size") or 16), float(have.get("font_size") or 16)
        if size_w >= 1.35 * size_h:
            out.append(Difference(0.25 + 0.4 * weight, f"{label} should be much larger.", "text_size"))
        elif size_h >= 1.35 * size_w:
            out.append(Difference(0.2 + 0.4 * weight, f"{label} should be smaller.", "text_size"))
        if want.get("font_weight", 400) >= 600 > have.get("font_weight", 400):
            out.append(Difference(0.15 + 0.3 * weight, f"{label} should be bold.", "text_weight"))
        colour_w, colour_h = parse_colour(want.get("color")), parse_colour(have.get("color"))
        if colour_w and _different(colour_w, colour_h, 90):
            out.append(Difference(0.2 + 0.35 * weight, f"{label} should be {colour_name(colour_w)}.", "text_colour"))
        centre_w = (want.get("x", 0) + want.get("w", 0) / 2) / self.width
        centre_h = (have.get("x", 0) + have.get("w", 0) / 2) / self.agent_width
        narrow = want.get("w", 0) < 0.8 * self.width
        if narrow and _is_heading(want) and abs(centre_w - 0.5) < 0.05 and abs(centre_h - 0.5) > 0.15:
            out.append(Difference(0.2 + 0.3 * weight, f"{label} should be centred.", "alignment"))
        return out

    def _layout(self) -> list[Difference]:
        out: list[Difference] = []
        if not self.agent:
            columns = max((b.get("columns", 0) for b in self._blocks(self.target) if b.get("h", 0) > 60), default=0)
            if columns >= 2:
                out.append(Difference(0.5, f"Part of my page is laid out in {columns} columns side by side.",
                                      "columns"))
            return out
        want = max((b.get("columns", 0) for b in self._blocks(self.target) if b.get("h", 0) > 60), default=0)
        have = max((b.get("columns", 0) for b in self._blocks(self.agent) if b.get("h", 0) > 60), default=0)
        if want >= 2 and have < want:
            stacked = "stacks them" if have <= 1 else f"has only {have}"
            out.append(Difference(0.6, f"My page puts {want} columns side by side; yours {stacked}.", "columns"))
        elif have >= 2 and want < 2:
            out.append(Difference(0.45, "My page stacks its content in one column; yours puts things side by side.",
                                  "columns"))
        agent_height = float(self.agent.get("height") or 800)
        ratio = agent_height / max(self.target_height, 1.0)
        if ratio < 0.6 and self.target_height > 900:
            out.append(Difference(0.4, f"My page is much longer than yours (about {1 / ratio:.1f} times).", "length"))
        elif ratio > 1.7 and agent_height > 900:
            out.append(Difference(0.35, f"Your page is much longer than mine (about {ratio:.1f} times).", "length"))
        return out

    def _images(self) -> list[Difference]:
        wanted = [i for i in self.target.get("images") or [] if i.get("w", 0) * i.get("h", 0) >= 400]
        present = [i for i in self.agent.get("images") or [] if i.get("w", 0) * i.get("h", 0) >= 400]
        out: list[Difference] = []
        if len(wanted) > len(present):
            biggest = max(wanted, key=lambda i: i.get("w", 0) * i.get("h", 0))
            area = biggest.get("w", 0) * biggest.get("h", 0) / (self.width * 800)
            where = "near the top" if biggest.get("y", 0) < 400 else "further down"
            if not present:
                text = (f"My page has {len(wanted)} image{'s' if len(wanted) > 1 else ''}; the biggest is about "
                        f"{biggest.get('w')}x{biggest.get('h')} pixels, {where}.")
                if self.agent:
                    text = text[:-1] + "; yours has none."
            else:
                text = f"My page has {len(wanted)} images, yours has {len(present)}."
            out.append(Difference(0.35 + 0.45 * min(1.0, area * 2), text, "images"))
        elif len(present) > len(wanted) and self.agent:
            text = "I don't want images on the page." if not wanted else \
                f"My page has only {len(wanted)} image{'s' if len(wanted) > 1 else ''}, yours has {len(present)}."
            out.append(Difference(0.3, text, "images"))
        return out

    def _target_colours(self, exclude: list[str]) -> list[Difference]:
        """With nothing to compare against: the colours that cover much of the target."""
        said = " ".join(exclude)
        for colour, share in dominant_colours(self.target_png):
            name = colour_name(colour)
            if share >= 0.1 and name not in said and name not in ("white", "light gray"):
                return [Difference(min(0.75, 0.35 + share), f"A lot of my page (about {round(share * 100)}%) "
                                   f"is {name}.", "palette")]
        return []

    def _palette(self, exclude: list[str]) -> list[Difference]:
        said = " ".join(exclude)
        out: list[Difference] = []
        if not self.target or not self.agent:  # no DOMs: compare the top/middle/bottom of the screen
            groups: dict[tuple[str, str], list[str]] = {}
            for label, want, have in zip(("top", "middle", "bottom"), _band_colours(self.target_png),
                                         _band_colours(self.agent_png)):
                if _different(want, have, 80):
                    groups.setdefault((colour_name(want), colour_name(have)), []).append(label)
            for (want, have), labels in groups.items():
                if len(labels) == 3:
                    sentence = f"My page is mostly {want}; yours is mostly {have}."
                elif len(labels) == 2:
                    sentence = f"The {labels[0]} and {labels[1]} of my page are mostly {want}; on yours they are {have}."
                else:
                    sentence = f"The {labels[0]} of my page is mostly {want}; on yours it is {have}."
                out.append(Difference(0.5 + 0.1 * len(labels), sentence, "band"))
                said += f" {want} {have}"
        target, agent = dominant_colours(self.target_png), dominant_colours(self.agent_png)
        for colour, share in target:
            if share < 0.04:
                continue
            closest = min((colour_distance(colour, c) for c, s in agent if s >= 0.01), default=999.0)
            name = colour_name(colour)
            if closest > 70 and name not in said:
                out.append(Difference(min(0.8, 0.3 + share), f"A lot of my page is {name} (about "
                                      f"{round(share * 100)}% of it); I don't see that colour on yours.", "palette"))
                said += " " + name
        for colour, share in agent:
            if share < 0.06:
                continue
            closest = min((colour_distance(colour, c) for c, s in target if s >= 0.01), default=999.0)
            name = colour_name(colour)
            if closest > 70 and name not in said:
                out.append(Difference(min(0.7, 0.25 + share), f"Your page has a lot of {name}, which mine doesn't "
                                      "use.", "palette"))
                said += " " + name
        return out


def _render_problem(status: str | None, error: str | None) -> str:
    if status == "refused":
        return "Your page is too big for me to open."
    if status == "timeout":
        return "Your page never finished loading for me."
    if status in ("error", "crashed"):
        return "Your page didn't load for me."
    return "I couldn't see your page."


class OfflineFrontendSimulator:
    """Compares the two renders and DOMs (no model) and says the main differences.

    ``max_points``: how many differences to mention per reply; ``max_chars``: reply length cap.
    """

    def __init__(self, max_points: int = 4, max_chars: int = MAX_REPLY_CHARS):
        if max_points < 1:
            raise ValueError("max_points must be >= 1")
        self.max_points = max_points
        self.max_chars = max_chars

    def reply(self, request: SimulatorRequest) -> SimulatorReply:
        extra = request.extra or {}
        target_dom = extra.get("target_dom")
        if request.target_render is None and not target_dom:
            return SimulatorReply("I can't picture my page right now.", error="the target page did not render")
        agent_dom = extra.get("agent_dom")
        has_page = request.agent_render is not None or bool(agent_dom)
        comparison = PageComparison(agent_dom if has_page else None, target_dom,
                                    request.agent_render if has_page else None, request.target_render)
        differences = comparison.differences()
        points = self._pick(differences, per_kind=2 if has_page else 1)
        if not has_page:
            if request.agent_html is not None:
                opening = _render_problem(extra.get("agent_render_status"), extra.get("agent_render_error"))
            else:
                opening = "I don't see a page from you yet."
            body = " ".join(d.sentence for d in points) or "It's a simple page."
            text = f"{opening} Here is what mine looks like: {body}"
        elif not points:
            text = "That looks just like the page I want."
        else:
            lead = "The main differences from the page I want:" if len(points) > 1 else "One difference:"
            text = f"{lead} {' '.join(d.sentence for d in points)}"
        return SimulatorReply(self._cut(text), usage={"differences": len(differences)})

    def _pick(self, differences: list[Difference], per_kind: int = 2) -> list[Difference]:
        chosen: list[Difference] = []
        kinds: dict[str, int] = {}
        for difference in differences:
            if difference.salience < 0.15:
                continue
            # variety: at most `per_kind` points of one kind (not four remarks on text sizes)
            if kinds.get(difference.kind, 0) >= per_kind:
                continue
            chosen.append(difference)
            kinds[difference.kind] = kinds.get(difference.kind, 0) + 1
            if len(chosen) == self.max_points:
                break
        return chosen

    def _cut(self, text: str) -> str:
        if len(text) <= self.max_chars:
            return text
        cut = text[: self.max_chars]
        end = cut.rfind(". ")
        return cut[: end + 1] if end > self.max_chars // 2 else cut[: self.max_chars - 1] + "…"
