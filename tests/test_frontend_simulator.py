"""The offline frontend human: what it notices, in what order, and how it says it (no browser)."""

from __future__ import annotations

import copy
import io

import numpy as np
import pytest

from colbench_gym.simulators.base import SimulatorRequest
from colbench_gym.simulators.offline_frontend import (
    OfflineFrontendSimulator,
    PageComparison,
    colour_name,
    parse_colour,
)
from colbench_gym.tasks import FrontendTask

GREEN, BLUE, WHITE, GRAY_100 = "rgb(16, 185, 129)", "rgb(59, 130, 246)", "rgb(255, 255, 255)", "rgb(243, 244, 246)"


def text(value, y, size=16, tag="p", x=16, w=600, weight=400, color="rgb(0, 0, 0)", background=GRAY_100):
    return {"text": value, "tag": tag, "x": x, "y": y, "w": w, "h": size + 8, "font_size": size,
            "font_weight": weight, "color": color, "background": background}


def block(tag, y, h, background, own=True, columns=1, text_="", depth=1, color="rgb(0, 0, 0)"):
    return {"tag": tag, "depth": depth, "x": 0, "y": y, "w": 1280, "h": h, "background": background,
            "own_background": own, "color": color, "columns": columns, "text": text_}


def target_dom():
    return {
        "title": "", "width": 1280, "height": 800, "background": GRAY_100, "font_family": "sans-serif",
        "texts": [
            text("Healthcare Provider", 20, 30, "h1", weight=700, color=WHITE, background=GREEN),
            text("Home Services Contact", 90, 16, "li"),
            text("Patient Information", 160, 24, "h2", weight=700),
            text("Your information is safe and secure with us.", 200, 16, "p"),
            text("Services", 160, 24, "h2", x=656, weight=700),
            text("We offer primary care and specialty care.", 200, 16, "p", x=656),
        ],
        "blocks": [block("header", 0, 68, GREEN, text_="Healthcare Provider", color=WHITE),
                   block("main", 130, 200, GRAY_100, own=False, columns=2),
                   block("footer", 744, 56, GREEN, text_="© 2022", color=WHITE)],
        "images": [],
        "counts": {"links": 3, "buttons": 0, "inputs": 0, "headings": 3},
    }


def png(colour_rows) -> bytes:
    from PIL import Image

    image = np.zeros((800, 1280, 3), np.uint8)
    for (top, bottom), rgb in colour_rows:
        image[top:bottom] = rgb
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="PNG")
    return buffer.getvalue()


TARGET_PNG = png([((0, 800), (243, 244, 246)), ((0, 68), (16, 185, 129)), ((744, 800), (16, 185, 129))])


def ask(agent_dom, agent_png=TARGET_PNG, target=None, agent_html="<html></html>", **extra):
    request = SimulatorRequest(
        task=FrontendTask("A healthcare site.", "<html></html>", "t"),
        messages=[{"role": "user", "content": "A healthcare site."}, {"role": "assistant", "content": "..."}],
        agent_html=agent_html, agent_render=agent_png, target_render=TARGET_PNG,
        extra={"agent_dom": agent_dom, "target_dom": target or target_dom(), **extra},
    )
    return OfflineFrontendSimulator().reply(request)


def test_colour_names():
    assert colour_name((16, 185, 129)) == "green"
    assert colour_name((59, 130, 246)) == "blue"
    assert colour_name((255, 255, 255)) == "white"
    assert colour_name((243, 244, 246)) == "light gray"
    assert colour_name((17, 24, 39)) == "black"
    assert colour_name((239, 68, 68)) == "red"
    assert colour_name((30, 58, 138)) == "dark blue"
    assert colour_name((252, 231, 243)) == "light pink"
    assert parse_colour("rgba(0, 0, 0, 0)") is None and parse_colour("rgb(1, 2, 3)") == (1, 2, 3)


def test_identical_pages():
    reply = ask(target_dom())
    assert reply.text == "That looks just like the page I want." and reply.error is None


def test_header_colour_is_the_first_thing_said():
    agent = target_dom()
    agent["blocks"][0]["background"] = BLUE
    agent["blocks"][2]["background"] = BLUE
    reply = ask(agent)
    assert reply.text.startswith("The main differences from the page I want: The header should be green, not blue.")
    assert "footer should be green, not blue" in reply.text


def test_missing_heading_and_columns():
    agent = target_dom()
    agent["texts"] = [t for t in agent["texts"] if t["text"] != "Patient Information"]
    agent["blocks"][1]["columns"] = 1
    reply = ask(agent)
    assert 'A heading near the top should say "Patient Information".' in reply.text
    assert "My page puts 2 columns side by side; yours stacks them." in reply.text


def test_text_style_and_extra_text():
    agent = target_dom()
    agent["texts"][0] = dict(agent["texts"][0], font_size=16, font_weight=400)
    agent["texts"].append(text("Buy our vitamins today", 400, 28, "h2", weight=700))
    reply = ask(agent)
    assert '"Healthcare Provider" should be much larger.' in reply.text
    assert '"Buy our vitamins today", which mine doesn\'t have' in reply.text


def test_without_a_page_the_human_describes_the_target():
    reply = ask(None, agent_png=None, agent_html=None)
    assert reply.text.startswith("I don't see a page from you yet. Here is what mine looks like:")
    assert '"Healthcare Provider"' in reply.text and "green header" in reply.text


def test_failed_render_is_explained():
    reply = ask(None, agent_png=None, agent_render_status="timeout")
    assert reply.text.startswith("Your page never finished loading for me.")


def test_pixels_alone_are_enough():
    agent_png = png([((0, 800), (17, 24, 39)), ((0, 68), (59, 130, 246))])
    request = SimulatorRequest(task=FrontendTask("x", "<html></html>", "t"), messages=[],
                               agent_html="<html></html>", agent_render=agent_png, target_render=TARGET_PNG)
    reply = OfflineFrontendSimulator().reply(request)
    assert "My page is mostly light gray; yours is mostly black." in reply.text, reply.text
    assert "green" in reply.text and "blue" in reply.text, reply.text


def test_replies_are_short_and_deterministic():
    agent = {"width": 1280, "height": 3000, "background": "rgb(0, 0, 0)",
             "texts": [text(f"Unrelated paragraph number {i} about cooking", 100 + 40 * i) for i in range(60)],
             "blocks": [block("nav", 0, 50, "rgb(200, 0, 0)", columns=4), block("aside", 50, 2000, BLUE)],
             "images": [{"tag": "img", "x": 0, "y": 100, "w": 300, "h": 200, "alt": ""}] * 5}
    first, second = ask(agent), ask(copy.deepcopy(agent))
    assert first.text == second.text
    assert len(first.text) <= 1000 and first.text.count(". ") >= 2
    differences = PageComparison(agent, target_dom(), TARGET_PNG, TARGET_PNG).differences()
    assert differences == sorted(differences, key=lambda d: (-d.salience, d.sentence))
    assert first.usage["differences"] == len(differences)


def test_max_chars_is_respected():
    agent = target_dom()
    agent["blocks"][0]["background"] = BLUE
    simulator = OfflineFrontendSimulator(max_points=6, max_chars=60)
    request = SimulatorRequest(task=FrontendTask("x", "<html></html>", "t"), messages=[],
                               agent_html="<html></html>", agent_render=TARGET_PNG, target_render=TARGET_PNG,
                               extra={"agent_dom": agent, "target_dom": target_dom()})
    assert len(simulator.reply(request).text) <= 60
    with pytest.raises(ValueError):
        OfflineFrontendSimulator(max_points=0)


# -- text in any script ----------------------------------------------------------------------------

def page_with(texts, width=1280):
    dom = target_dom()
    dom["texts"], dom["width"] = texts, width
    return dom


def test_chinese_text_is_compared():
    """Only [a-z0-9] counted as words: a completely different Chinese headline 'looked just like' the target."""
    target = page_with([text("欢迎来到我们的餐厅", 20, 36, "h1", weight=700, color=WHITE, background=GREEN),
                        text("我们提供最好的中国菜，新鲜的食材和传统的烹饪方法。", 200, 16, "p")])
    wrong = page_with([text("完全不同的标题文字", 20, 36, "h1", weight=700, color=WHITE, background=GREEN),
                       text("我们提供最好的中国菜，新鲜的食材和传统的烹饪方法。", 200, 16, "p")])
    reply = ask(wrong, target=target).text
    assert 'A heading near the top should say "欢迎来到我们的餐厅".' in reply, reply
    assert 'Your page shows "完全不同的标题文字", which mine doesn\'t have.' in reply, reply
    assert ask(copy.deepcopy(target), target=target).text == "That looks just like the page I want."
    # the same heading with one character changed still matches (it is the style that differs)
    close = page_with([text("欢迎来到我们的饭店", 20, 16, "h1", weight=700, color=WHITE, background=GREEN),
                       target["texts"][1]])
    assert '"欢迎来到我们的餐厅" should be much larger.' in ask(close, target=target).text


@pytest.mark.parametrize("heading", ["مَرْحَبًا بكم في متجرنا", "हमारी दुकान में आपका स्वागत है", "ยินดีต้อนรับสู่ร้านของเรา",
                                     "ようこそ私たちの店へ", "Добро пожаловать в наш магазин"])
def test_heading_size_is_noticed_in_any_script(heading):
    target = page_with([text(heading, 20, 36, "h1", weight=700)])
    small = page_with([text(heading, 20, 14, "h1", weight=700)])
    assert ask(small, target=target).text == f'One difference: "{heading}" should be much larger.'


def test_quotes_without_spaces_are_cut_at_a_character_budget():
    long_heading = "我们的餐厅提供最好的中国菜" * 10
    reply = ask(page_with([]), target=page_with([text(long_heading, 20, 36, "h1")])).text
    quoted = reply.split('should say "', 1)[1].split('"', 1)[0]
    assert quoted.endswith("…") and long_heading.startswith(quoted[:-1])
    assert len(quoted) - 1 == 30  # 60 columns of double-width characters
    # a short first word does not swallow the budget: this used to be quoted as "Menu…"
    mixed = "Menu " + "我们的餐厅提供最好的中国菜" * 10
    reply = ask(page_with([]), target=page_with([text(mixed, 20, 36, "h1")])).text
    quoted = reply.split('should say "', 1)[1].split('"', 1)[0]
    assert quoted == mixed[:5 + 27] + "…"  # 5 + 2 * 27 = 59 columns
    # accents take no room, and a cut never separates a letter from its vowel sign
    for heading, expected in (("e\u0301" * 80, "e\u0301" * 60), ("a" + "कि" * 40, "a" + "कि" * 29)):
        reply = ask(page_with([]), target=page_with([text(heading, 20, 36, "h1")])).text
        assert reply.split('should say "', 1)[1].split('"', 1)[0] == expected + "…"


def test_replies_in_other_scripts_stay_short_and_deterministic():
    texts = [text(("标题" * 40) + str(i), 40 * i, 30 if i % 3 == 0 else 16, "h2" if i % 3 == 0 else "p")
             for i in range(60)]
    target = page_with(texts)
    agent = page_with([dict(t, text=t["text"][::-1], font_size=12) for t in texts])
    first, second = ask(agent, target=target), ask(copy.deepcopy(agent), target=copy.deepcopy(target))
    assert first.text == second.text and len(first.text) <= 1000
    assert "<" not in first.text and "class=" not in first.text


# -- positions are fractions of the window, not of the scrollable width --------------------------------

def test_overflow_does_not_move_the_centre():
    """A 4000px-wide invisible strip made the scroll width 4000: 'should be centred' about a centred title."""
    centred = [text("Centered Title Here", 32, 36, "h1", x=480, w=320, weight=700),
               text("Some body text for the page.", 120, 16, "p", w=1248)]
    target = page_with(centred)
    wide = page_with(copy.deepcopy(centred), width=4000)  # the DOM summary's width is the scroll width
    assert ask(wide, target=target).text == "That looks just like the page I want."
    assert ask(copy.deepcopy(target), target=page_with(copy.deepcopy(centred), width=4000)).text == \
        "That looks just like the page I want."
    left = page_with([dict(centred[0], x=16), centred[1]], width=4000)
    assert '"Centered Title Here" should be centred.' in ask(left, target=target).text
    # without screenshots the summary's width is all there is
    assert PageComparison(wide, target).width == 1280 and PageComparison(wide, target).agent_width == 4000
    assert PageComparison(wide, target, TARGET_PNG, TARGET_PNG).agent_width == 1280
