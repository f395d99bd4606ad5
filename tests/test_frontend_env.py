"""ColBench-Frontend-v0: page extraction, the dialogue with a seeing human, scoring, failures."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest

import colbench_gym  # noqa: F401  (registers the ids)
from colbench_gym.envs.frontend import FrontendEnv, extract_html
from colbench_gym.rendering import (
    AssetsMissingError,
    RenderConfig,
    RendererUnavailable,
    shared_renderer,
)
from colbench_gym.rewards import SimilarityUnavailable
from colbench_gym.simulators.base import ScriptedSimulator


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("no page here", None),
        ("Draft: OUTPUT: <html><body><p>a</p></body></html> what do you think?", "<html><body><p>a</p></body></html>"),
        ("<html><p>first</p></html> and <html><p>second</p></html>", "<html><p>first</p></html>"),
        ("<!DOCTYPE html>\n<HTML lang=en><p>x</p></HTML>", "<!DOCTYPE html>\n<HTML lang=en><p>x</p></HTML>"),
        ("Here: <body class='p-4'><h1>Hi</h1></body> ok", "<body class='p-4'><h1>Hi</h1></body>"),
        ("```html\n<html><p>cut off", "<html><p>cut off"),
        ("<html><p>before</p></html> OUTPUT: <html><p>after</p></html>", "<html><p>after</p></html>"),
        ("OUTPUT: just words", None),
    ],
)
def test_extract_html(message, expected):
    assert extract_html(message) == expected


def test_registered_entry_point():
    spec = gym.spec("ColBench-Frontend-v0")
    assert spec.entry_point == "colbench_gym.envs.frontend:FrontendEnv"


# -- with a browser ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def renderer():
    try:
        return shared_renderer()
    except (AssetsMissingError, RendererUnavailable, ImportError) as err:
        pytest.skip(f"renderer not set up: {err}")


class Recorder(ScriptedSimulator):
    """Scripted replies, keeping what the human was shown."""


def make_env(renderer, **kwargs) -> FrontendEnv:
    kwargs.setdefault("similarity", "ssim")
    return gym.make("ColBench-Frontend-v0", renderer=renderer, **kwargs).unwrapped


@pytest.mark.browser
def test_episode_with_the_offline_human(renderer):
    env = make_env(renderer, tasks="test")
    obs, info = env.reset(options={"task_id": "frontend-signup-form"})
    assert obs.startswith(f"Instructions: {env.instructions}\n\nHuman: Account Sign-up Page") and info["turn"] == 0
    assert "OUTPUT:" in env.unwrapped.instructions and "tailwindcss@2.2.19" in env.unwrapped.instructions
    target = info["privileged"]["ground_truth"]
    assert target.startswith("<html>") and "Create your account" in target

    obs, reward, terminated, truncated, info = env.step("Which colours do you have in mind?")
    assert (reward, terminated, truncated) == (0.0, False, False) and info["render"] is None
    reply = info["messages"][-1]["content"]
    assert "don't see a page" in reply and "Notable" in reply and 0 < len(reply) <= 1000

    draft = "Draft below. OUTPUT: <html><body class='bg-white'><h1 class='text-xl'>Notable</h1></body></html>"
    obs, reward, terminated, truncated, info = env.step(draft)
    assert info["render"]["status"] == "ok" and reward == 0.0
    reply = info["messages"][-1]["content"]
    assert reply.startswith("The main differences") and "blue" in reply and "Create your account" in reply
    assert info["simulator_error"] is None

    obs, reward, terminated, truncated, info = env.step("I WANT TO ANSWER:\n" + target)
    assert terminated and not truncated
    assert reward == pytest.approx(1.0, abs=1e-9) == info["similarity"]
    assert info["similarity_metric"] == "ssim" and info["similarity_config"]["metric"] == "ssim"
    assert info["render_status"] == "ok" and info["success"] and not info["infra_error"]
    assert info["outcome"] == "answered" and info["score"] == reward


@pytest.mark.browser
def test_simulator_sees_both_renders_and_doms(renderer):
    human = Recorder(["noted"])
    env = make_env(renderer, tasks="train", simulator=human)
    env.reset(options={"task_id": "frontend-bakery-landing"})
    env.step("A question first.")
    env.step("OUTPUT: <html><body><h1>Crumb</h1></body></html>")
    no_page, with_page = human.calls
    assert no_page.agent_html is None and no_page.agent_render is None and no_page.target_render
    assert no_page.extra["target_dom"]["texts"]
    assert with_page.agent_html == "<html><body><h1>Crumb</h1></body></html>"
    assert with_page.agent_render.startswith(b"\x89PNG") and with_page.target_render.startswith(b"\x89PNG")
    assert with_page.extra["agent_dom"]["texts"][0]["text"] == "Crumb"
    assert with_page.extra["agent_render_status"] == "ok"
    assert with_page.messages[-1] == {"role": "assistant", "content": "OUTPUT: <html><body><h1>Crumb</h1></body></html>"}


@pytest.mark.browser
def test_reward_is_the_last_page_shown(renderer):
    rows = [{"task_id": "t", "problem_description": "A page with a red banner.",
             "ground_truth": "<html><body><div style='background:#c00;height:300px'></div><p>Hello</p></body></html>"}]
    env = make_env(renderer, tasks=rows, simulator=ScriptedSimulator("ok"), max_turns=2)
    env.reset()
    env.step("OUTPUT: " + rows[0]["ground_truth"])
    _, reward, terminated, truncated, info = env.step("OUTPUT: <html><body><p>Hello</p></body></html>")
    assert truncated and not terminated and info["outcome"] == "no_answer"
    assert 0.0 < reward < 0.99 and info["render_status"] == "ok"
    # answering without a page scores the last page shown
    env.reset()
    env.step("OUTPUT: " + rows[0]["ground_truth"])
    _, reward, terminated, _, info = env.step("I WANT TO ANSWER: the page above")
    assert terminated and reward == pytest.approx(1.0, abs=1e-9)
    # no page at all
    env.reset()
    _, reward, *_, info = env.step("I WANT TO ANSWER: sorry")
    assert reward == 0.0 and info["render_status"] == "no_page" and info["similarity"] == 0.0


@pytest.mark.browser
def test_a_page_that_fails_to_render_scores_zero():
    try:
        small = shared_renderer(RenderConfig(max_html_bytes=2_000))
    except (AssetsMissingError, RendererUnavailable, ImportError) as err:
        pytest.skip(f"renderer not set up: {err}")
    target = "<html><body><p>target</p></body></html>"
    env = make_env(small, tasks=[{"problem_description": "Anything.", "ground_truth": target}],
                   simulator=ScriptedSimulator("ok"))
    env.reset()
    env.step("OUTPUT: " + target)  # a good page first: the failed final page must not fall back to it
    _, reward, *_, info = env.step("I WANT TO ANSWER: <html><body>" + "<p>too long</p>" * 200 + "</body></html>")
    assert reward == 0.0 and info["render_status"] == "refused" and not info["infra_error"]
    assert info["final_render"]["status"] == "refused" and info["similarity"] == 0.0 and not info["success"]
    env.reset()
    _, reward, *_, info = env.step("I WANT TO ANSWER: " + target)
    assert reward == pytest.approx(1.0, abs=1e-9)


@pytest.mark.browser
def test_blocked_requests_are_surfaced_in_info(renderer):
    env = make_env(renderer, tasks="test", simulator=ScriptedSimulator("ok"))
    env.reset(options={"task_index": 0})
    *_, info = env.step(
        "OUTPUT: <html><body><img src='https://tracker.example.com/p.gif'><script>fetch('https://x.example.org/')</script></body></html>")
    assert info["render"]["blocked_requests"] == 2
    assert any("tracker.example.com" in url for url in info["render"]["blocked_urls"])


@pytest.mark.browser
def test_privileged_false_and_rgb_array(renderer):
    env = gym.make("ColBench-Frontend-v0", tasks="test", similarity="ssim", renderer=renderer,
                   privileged=False, render_mode="rgb_array", simulator=ScriptedSimulator("ok"))
    obs, info = env.reset(seed=3)
    assert "privileged" not in info and (env.render() == 255).all()
    obs, *_, info = env.step("OUTPUT: <html><body style='background:#00f'></body></html>")
    assert "privileged" not in info and "ground_truth" not in obs
    frame = env.render()
    assert frame.shape == (800, 1280, 3) and tuple(frame[400, 640]) == (0, 0, 255)


@pytest.mark.browser
def test_copies_and_pickles_rebuild_the_renderer_and_the_metric(renderer):
    import copy
    import pickle

    env = gym.make("ColBench-Frontend-v0", tasks="test", similarity="ssim", simulator=ScriptedSimulator("ok")).unwrapped
    env.reset(seed=1)
    env.step("OUTPUT: <html><body style='background:#0f0'><p>draft</p></body></html>")
    for clone in (copy.deepcopy(env), pickle.loads(pickle.dumps(env))):
        assert clone.renderer is env.renderer  # the process-wide browsers, not copies
        assert clone.similarity is not env.similarity and clone.similarity.name == "ssim"
        assert clone.messages == env.messages and clone.turn == 1
        _, reward, terminated, _, info = clone.step("I WANT TO ANSWER: " + clone.task.ground_truth)
        assert terminated and info["render_status"] == "ok" and reward == pytest.approx(1.0, abs=1e-6)
    assert env.turn == 1 and not env._done  # the original goes on where it was


@pytest.mark.browser
def test_tasks_from_a_jsonl_file(renderer, tmp_path):
    path = tmp_path / "pages.jsonl"
    path.write_text(json.dumps({"problem_description": "A page.", "ground_truth": "<html><p>x</p></html>"}) + "\n")
    env = make_env(renderer, tasks=str(path))
    assert len(env.tasks) == 1 and env.tasks[0].task_id.startswith("frontend-")


def test_similarity_is_never_switched_silently(monkeypatch):
    try:
        renderer = shared_renderer()
    except (AssetsMissingError, RendererUnavailable, ImportError) as err:
        pytest.skip(f"renderer not set up: {err}")
    with pytest.raises(SimilarityUnavailable, match="similarity='ssim'"):
        gym.make("ColBench-Frontend-v0", renderer=renderer, similarity="clip",
                 similarity_kwargs={"model": "/nonexistent/clip"})
    with pytest.raises(ValueError, match="unknown similarity"):
        gym.make("ColBench-Frontend-v0", renderer=renderer, similarity="pixels")


@pytest.mark.browser
def test_clip_similarity_in_the_env(renderer, tmp_path):
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    config = transformers.CLIPConfig(
        text_config={"vocab_size": 99, "hidden_size": 32, "intermediate_size": 37, "num_hidden_layers": 1,
                         "num_attention_heads": 4, "max_position_embeddings": 32, "bos_token_id": 0, "eos_token_id": 1,
                         "pad_token_id": 1},
        vision_config={"hidden_size": 32, "intermediate_size": 37, "num_hidden_layers": 1, "num_attention_heads": 4,
                           "image_size": 32, "patch_size": 8},
        projection_dim=16,
    )
    torch.manual_seed(0)
    transformers.CLIPModel(config).save_pretrained(tmp_path)
    processor = getattr(transformers, "CLIPImageProcessorPil", None) or transformers.CLIPImageProcessor
    processor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}).save_pretrained(tmp_path)
    env = make_env(renderer, tasks="test", similarity="clip", similarity_kwargs={"model": str(tmp_path)},
                   simulator=ScriptedSimulator("ok"))
    _, info = env.reset(options={"task_id": "frontend-weather-app"})
    _, reward, *_, info = env.step("I WANT TO ANSWER: " + info["privileged"]["ground_truth"])
    assert reward == pytest.approx(1.0, abs=1e-5) and info["similarity_metric"] == "clip"
    assert info["similarity_config"]["model"] == str(tmp_path)
    env.reset(options={"task_id": "frontend-weather-app"})
    _, reward, *_, info = env.step("I WANT TO ANSWER: <html><body><h1>Weather</h1></body></html>")
    assert 0.0 <= reward < 0.9999 and type(reward) is float


# -- long pages and messages -------------------------------------------------------------------------

RED = "<html><body style='margin:0;background:#c00'><p>end</p></body></html>"


def padded_red_page(comment_chars: int) -> str:
    """The red page with an HTML comment inside: it renders like ``RED`` whatever the comment's length."""
    return f"<html><body style='margin:0;background:#c00'><!--{'x' * comment_chars}--><p>end</p></body></html>"


@pytest.mark.browser
def test_a_page_under_the_limit_is_rendered_whole(renderer):
    env = make_env(renderer, tasks=[{"problem_description": "A red page.", "ground_truth": RED}],
                   simulator=ScriptedSimulator("ok"))
    assert env.max_action_chars == 1_100_000 and env.action_space.max_length == 1_100_000
    env.reset()
    page = padded_red_page(990_000)  # 990,076 bytes: a whole page, taken as it is
    _, reward, terminated, _, info = env.step("I WANT TO ANSWER: " + page)
    assert terminated and info["render_status"] == "ok" and reward == pytest.approx(1.0, abs=1e-6)
    assert "action_truncated_from" not in info and info["answer"] == page


@pytest.mark.browser
def test_a_page_over_one_megabyte_is_refused_not_cut(renderer):
    env = make_env(renderer, tasks=[{"problem_description": "A red page.", "ground_truth": RED}],
                   simulator=ScriptedSimulator("ok"))
    env.reset()
    env.step("OUTPUT: " + RED)  # a good page first: a refused final page must not fall back to it
    page = padded_red_page(1_050_000)  # 1,050,076 bytes, in a message under the 1,100,000-character limit
    obs, reward, terminated, _, info = env.step("I WANT TO ANSWER: " + page)
    assert terminated and reward == 0.0 and info["similarity"] == 0.0 and not info["success"]
    assert info["render_status"] == "refused" and not info["infra_error"]
    assert info["final_render"]["error"] == "page is 1050076 bytes, over the 1000000-byte limit: not rendered"
    assert "action_truncated_from" not in info and "[Your message was cut" not in obs


@pytest.mark.browser
def test_a_message_over_the_limit_is_cut_and_its_page_refused(renderer):
    env = make_env(renderer, tasks=[{"problem_description": "A red page.", "ground_truth": RED}])
    env.reset()
    message = "OUTPUT: " + padded_red_page(1_500_000)  # 1.5 MB: today cut and scored 0.59 with status ok
    obs, reward, terminated, _, info = env.step(message)
    assert not terminated and info["render"]["status"] == "refused"
    assert info["render"]["error"] == ("the page was cut with its message (1,500,084 characters, over the limit "
                                       "of 1,100,000): not rendered")
    assert info["action_truncated_from"] == 1_500_084 and info["action_truncated_to"] == 1_100_000
    reply = info["messages"][-1]["content"]  # the offline human: the note first, then what they saw
    assert reply.startswith("[Your message was cut: it had 1,500,084 characters, over the limit of 1,100,000; "
                            "only its first 1,100,000 were kept, the last 400,084 were dropped.]\n\n"
                            "Your page is too big for me to open.")
    assert obs.endswith("Human: " + reply) and len(info["messages"][-2]["content"]) == 1_100_000
    _, reward, terminated, _, info = env.step("I WANT TO ANSWER: the page above")
    assert terminated and reward == 0.0 and info["render_status"] == "refused"


@pytest.mark.browser
def test_a_page_before_the_cut_is_rendered_and_strict_mode_raises(renderer):
    rows = [{"problem_description": "A red page.", "ground_truth": RED}]
    env = make_env(renderer, tasks=rows, simulator=ScriptedSimulator("ok"))
    env.reset()
    obs, reward, terminated, _, info = env.step("I WANT TO ANSWER: " + RED + " " + "z" * 1_200_000)
    assert terminated and info["render_status"] == "ok" and reward == pytest.approx(1.0, abs=1e-6)
    assert info["action_truncated_from"] == 1_200_000 + len("I WANT TO ANSWER: " + RED + " ")
    assert obs.endswith("only its first 1,100,000 were kept, the last 100,088 were dropped.]")

    from colbench_gym.envs.dialogue import ActionTooLongError

    strict = make_env(renderer, tasks=rows, simulator=ScriptedSimulator("ok"), long_actions="raise")
    strict.reset()
    with pytest.raises(ActionTooLongError, match=r"the action has 1,500,084 characters, over this environment's "
                                                 r"limit of 1,100,000 \(long_actions='raise'\); nothing was done"):
        strict.step("OUTPUT: " + padded_red_page(1_500_000))
    assert strict.turn == 0 and len(strict.messages) == 2 and strict.render_mode is None
    _, reward, terminated, _, info = strict.step("I WANT TO ANSWER: " + RED)
    assert terminated and info["turn"] == 1 and reward == pytest.approx(1.0, abs=1e-6)
