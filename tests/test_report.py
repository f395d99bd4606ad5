"""The HTML run report: built from the files stages leave behind, self-contained, and readable in Chromium."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from sweet_trl.report import build_report, load_run
from sweet_trl.report.html import advantage_color

DIALOGUE = [
    {"role": "user", "content": "I need a function <b>shipping_cost</b>."},
    {"role": "assistant", "content": "Is there a surcharge for heavy parcels?"},
    {"role": "user", "content": "Yes, above 20 kg."},
    {"role": "assistant", "content": "What colour is the box?"},
    {"role": "user", "content": "I don't know."},
    {"role": "assistant", "content": "I WANT TO ANSWER:\ndef shipping_cost(w, d):\n    return 5"},
]


def _marker(run: Path, folder: str, stage: str, seconds: float, counts=None, metrics=None, outputs=None,
            info=None) -> None:
    path = run / folder
    path.mkdir(parents=True, exist_ok=True)
    (path / "_COMPLETE.json").write_text(json.dumps({
        "stage": stage, "dir": folder, "fingerprint": "f" * 16, "seconds": seconds,
        "started_at": f"2026-01-01T00:00:{int(seconds):02d}+00:00", "finished_at": "2026-01-01T00:01:00+00:00",
        "counts": counts or {}, "metrics": metrics or {}, "outputs": outputs or {}, "info": info or {},
        "config": [{"run_dir": str(run), "env_id": "ColBench-Frontend-v0", "policy_model": "embedded"}],
        "versions": {"trl": "1.0"},
    }))


def _jsonl(path: Path, rows) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _png(path: Path, colour: tuple[int, int, int]) -> None:
    from PIL import Image

    Image.new("RGB", (64, 40), colour).save(path)


@pytest.fixture
def run_dir(tmp_path) -> Path:
    run = tmp_path / "demo"
    _marker(run, "collect", "collect", 120.0, {"episodes": 3}, {"mean_reward": 0.4},
            {"trajectories": "trajectories.jsonl"})
    _jsonl(run / "collect" / "trajectories.jsonl",
           [{"reward": r, "success": r == 1.0, "dialogue_history": DIALOGUE} for r in (0.0, 0.5, 1.0)] + ["broken"])
    (run / "collect" / "trajectories.jsonl").open("a").write("{not json\n")
    for stage, key in (("train_critic", "pair_accuracy"), ("train_policy", "rewards/margins")):
        _marker(run, stage, stage, 60.0, {"pairs": 8, "steps": 3}, {"train_loss": 0.6},
                {"model": "model", "log_history": "log_history.json"})
        history = [{"loss": 0.7 - 0.1 * s, key: 0.5 + 0.1 * s, "step": s, "epoch": s / 3} for s in (1, 2, 3)]
        history.append({"train_runtime": 3.0, "train_loss": 0.6, "step": 3})
        (run / stage / "log_history.json").write_text(json.dumps(history))
    _marker(run, "rank", "rank", 30.0, {"turn_states": 4}, {}, {"trajectory_advantages": "adv.jsonl"})
    _jsonl(run / "rank" / "adv.jsonl", [{"episode_id": "t/0", "task_id": "t", "reward": 0.5, "success": False,
                                         "dialogue_history": DIALOGUE, "advantages": [0.2, -0.1, None]}])
    for policy, reward in (("zero_shot", 0.2), ("sweet", 0.6)):
        folder = f"evaluate/{policy}"
        _marker(run, folder, "evaluate", 20.0, {"episodes": 2},
                {"success_rate": reward / 2, "mean_reward": reward, "answered_rate": 1.0, "mean_turns": 2.5},
                {"trajectories": "trajectories.jsonl", "renders": "renders/index.jsonl"}, {"policy": policy})
        _jsonl(run / folder / "trajectories.jsonl", [
            {"episode_id": f"{policy}/0", "task_id": "t", "reward": reward, "success": False,
             "dialogue_history": [*DIALOGUE[:2], {"role": "assistant", "content": f"Asked by {policy}?"}]},
            {"episode_id": f"{policy}/1", "task_id": "t", "reward": reward / 2, "success": False}])
        (run / folder / "renders").mkdir()
        _png(run / folder / "renders" / "00-agent.png", (200, 30, 30))
        _png(run / folder / "renders" / "00-target.png", (30, 30, 200))
        _jsonl(run / folder / "renders" / "index.jsonl",
               [{"episode_id": "p/0", "task_id": "p", "reward": reward, "agent": "00-agent.png",
                 "target": "00-target.png"},
                {"episode_id": "p/1", "task_id": "p", "reward": 0.0, "target": "00-target.png",
                 "agent_error": "timeout: took too long"}])
    return run


def test_report_holds_every_section_and_is_self_contained(run_dir):
    path = build_report(run_dir)
    assert path == run_dir / "report.html"
    html = path.read_text()
    for section in ("results", "stages", "rewards", "training", "trajectories", "episodes", "renders", "config"):
        assert f"id='{section}'" in html, section
    figures = set(re.findall(r'data-figure="([^"]+)"', html))
    assert figures == {"evaluation", "stage-timings", "stage-counts", "rewards", "training-train_critic",
                       "training-train_policy"}
    assert html.count("<svg") == len(figures)
    # No external assets: no scripts, stylesheets or images fetched from anywhere.
    assert "<script" not in html and "<link" not in html
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html)
    assert html.count("src='data:image/png;base64,") == 6  # two policies: 2 + 1 renders each
    assert "timeout: took too long" in html
    # Text from the dialogue is escaped, never interpreted.
    assert "<b>shipping_cost</b>" not in html and "&lt;b&gt;shipping_cost&lt;/b&gt;" in html
    # Two agent turns have advantages (one credited, one blamed); the third has none and is not shaded.
    shaded = re.findall(r"class='turn agent' style='background:rgba\(([\d,]+),([\d.]+)\)' data-advantage='([^']+)'",
                        html)
    assert [(rgb, float(adv)) for rgb, _, adv in shaded] == [("26,127,55", 0.2), ("207,34,46", -0.1)]
    credit = html.split("id='trajectories'")[1].split("</section>")[0]
    assert credit.count("class='turn agent'>") == 1
    # what each evaluated policy said, under its name
    episodes = html.split("id='episodes'")[1].split("</section>")[0]
    by_policy = {block.split("</h3>")[0]: block for block in episodes.split("<h3>")[1:]}
    assert set(by_policy) == {"zero_shot", "sweet"}
    assert all(f"Asked by {policy}?" in block and block.count("class='trajectory'") == 2
               for policy, block in by_policy.items())


def test_report_of_an_empty_or_partial_run(tmp_path, run_dir):
    empty = tmp_path / "empty"
    empty.mkdir()
    html = build_report(empty).read_text()
    assert "No policy has been evaluated yet" in html and "<svg" not in html
    with pytest.raises(FileNotFoundError):
        build_report(tmp_path / "missing")
    (run_dir / "rank" / "_COMPLETE.json").write_text("{truncated")  # a marker being written: ignored
    data = load_run(run_dir)
    assert "rank" not in data.markers and "evaluate/sweet" in data.markers
    assert list(data.evaluations()) == ["zero_shot", "sweet"] or set(data.evaluations()) == {"zero_shot", "sweet"}


def test_advantage_colours_scale_with_the_largest_advantage():
    assert advantage_color(0.5, 0.5) == "rgba(26,127,55,0.680)"
    assert advantage_color(-0.5, 0.5) == "rgba(207,34,46,0.680)"
    assert advantage_color(0.0, 0.5) == "rgba(26,127,55,0.080)"
    assert advantage_color(3.0, 0.5) == advantage_color(0.5, 0.5)  # clipped
    assert advantage_color(0.1, 0.0) == "rgba(26,127,55,0.080)"


def test_comparison_intervals_draw_each_difference_and_interval_where_the_json_puts_them():
    from sweet_trl.report.figures import comparison_intervals

    def entry(difference, low, high):
        return {"difference": difference, "ci": [low, high]}

    series = {
        "seed 0": {"sweet - rft": {"success": entry(0.05, -0.01, 0.11), "seen": entry(0.10, 0.02, 0.18),
                                   "unseen": entry(-0.03, -0.08, 0.02)},
                   "rft - start": {"success": entry(0.02, 0.0, 0.04), "seen": None, "unseen": entry(0.0, 0.0, 0.0)}},
        "seed 1": {"sweet - rft": {"success": entry(-0.04, -0.09, 0.01), "seen": entry(0.0, -0.05, 0.05),
                                   "unseen": entry(-0.06, -0.12, 0.0)}},
    }
    series["seed 2"] = {"sweet - rft": {"success": entry(0.01, -0.02, 0.04), "seen": entry(0.01, -0.02, 0.04),
                                        "unseen": None}, "rft - start": None}  # no unseen tasks, no test read
    figure = comparison_intervals(series, aim={"part": "unseen", "points": 5.0, "rows": ["sweet - rft"],
                                               "label": "aim"})
    axes = figure.axes
    assert [ax.get_title() for ax in axes] == ["all test tasks", "seen templates", "unseen templates"]
    assert [t.get_text() for t in axes[0].get_yticklabels()] == ["sweet - rft", "rft - start"]
    # every series in the legend, the one drawn in no unseen panel too, and the aim
    assert [text.get_text() for text in figure.legends[0].get_texts()] == ["seed 0", "seed 1", "seed 2", "aim"]

    def drawn(ax):
        """(label, y) -> (x, low, high) in points, from the error bars matplotlib holds."""
        points = {}
        for container in ax.containers:
            marker, _, (bars,) = container
            for x, y, segment in zip(*marker.get_data(), bars.get_segments()):
                points[(container.get_label(), round(float(y), 3))] = (
                    float(x), float(segment[0][0]), float(segment[1][0]))
        return points

    top, below, step = 1, 0, 0.7 / 3  # the first comparison is drawn on top; three series around each row
    everything, seen, unseen = (drawn(ax) for ax in axes)
    assert everything[("seed 0", round(top + step, 3))] == pytest.approx((5.0, -1.0, 11.0))
    assert everything[("seed 1", top)] == pytest.approx((-4.0, -9.0, 1.0))
    assert everything[("seed 0", round(below + step, 3))] == pytest.approx((2.0, 0.0, 4.0))
    assert len(everything) == 4
    assert ("seed 0", round(below + step, 3)) not in seen and len(seen) == 3  # a part without tasks: left out
    assert unseen[("seed 1", top)] == pytest.approx((-6.0, -12.0, 0.0))
    assert len(unseen) == 3 and not any(label == "seed 2" for label, _ in unseen)
    [aim_marks] = [c for c in axes[2].collections if c.get_label() == "aim"]
    [[(x0, y0), (x1, y1)]] = aim_marks.get_segments()  # on the row the aim judges, not across the panel
    assert x0 == x1 == 5.0 and y0 < top < y1 and y1 - y0 < 1
    assert not any(c.get_label() == "aim" for ax in axes[:2] for c in ax.collections)
    off = {"sweet - rft": {"success": {"difference": 0.0500000001, "ci": [0.01, 0.05]}, "seen": None, "unseen": None}}
    comparison_intervals({"seed 0": off})  # a difference a rounding outside its interval draws a bar of 0
    with pytest.raises(ValueError, match="no comparisons"):
        comparison_intervals({"seed 0": {}})


def test_report_command_writes_to_the_configured_path(run_dir, tmp_path):
    from sweet_trl.pipeline import report_command

    config = tmp_path / "run.yaml"
    config.write_text(f"run_dir: {run_dir}\nreport:\n  report_path: {tmp_path / 'out' / 'r.html'}\n")
    out = io.StringIO()
    path = report_command(config, ["--report_examples", "1"], stream=out)
    assert path == tmp_path / "out" / "r.html" and path.exists()
    assert str(path) in out.getvalue()


def test_report_takes_the_run_folder_as_status_does_and_refuses_a_stage_or_a_fair_study(run_dir, tmp_path, capsys):
    import shutil

    from sweet_trl.cli import main

    moved = tmp_path / "moved_run"  # a run read where it is now: titled by its folder, not its configured run_dir
    shutil.copytree(run_dir, moved)
    assert main(["report", str(moved), "--report_examples", "1"]) == 0
    assert "<h1>SWEET-RL run: moved_run</h1>" in (moved / "report.html").read_text()
    assert str(moved / "report.html") in capsys.readouterr().out
    # a stage's folder (one level deep or two): the report is of its run
    assert main(["report", str(moved / "evaluate" / "sweet")]) == 2
    assert f"is a stage's folder; the report is of the run that holds it: sweet-rl report --run_dir {moved}" \
        in capsys.readouterr().err
    assert not (moved / "evaluate" / "sweet" / "report.html").exists()
    with pytest.MonkeyPatch.context() as patch:  # named from inside the run, relative to where one stands
        patch.chdir(moved / "evaluate")
        assert main(["report", "sweet"]) == 2
    assert f"the report is of the run that holds it: sweet-rl report --run_dir {moved.resolve()}" \
        in capsys.readouterr().err
    fair = tmp_path / "fair_run"
    for folder in ("protocol", "fair/sweet_best/round1", "warm_start"):
        (fair / folder).mkdir(parents=True)
    assert main(["report", str(fair)]) == 2
    assert f"`sweet-rl fair-report {fair}` prints its tables" in capsys.readouterr().err


@pytest.mark.browser
def test_report_renders_in_chromium(run_dir, tmp_path):
    playwright = pytest.importorskip("playwright.sync_api")
    chromium = Path("/usr/bin/chromium")
    if not chromium.exists():
        pytest.skip("no Chromium at /usr/bin/chromium")
    path = build_report(run_dir)
    requests: list[str] = []
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(chromium), args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        page.on("request", lambda request: requests.append(request.url))
        page.goto(path.as_uri())
        assert page.title().startswith("SWEET-RL run")
        figures = page.locator("figure.figure")
        assert figures.count() == 6
        for index in range(figures.count()):  # every plot is drawn with a real size
            box = figures.nth(index).locator("svg").bounding_box()
            assert box and box["width"] > 200 and box["height"] > 100
        curves = page.locator("[data-figure='training-train_critic'] svg path")
        assert curves.count() > 10
        shaded = page.locator(".turn.agent[data-advantage]")
        assert shaded.count() == 2
        colours = [shaded.nth(i).evaluate("e => getComputedStyle(e).backgroundColor") for i in range(2)]
        assert colours[0].startswith("rgba(26, 127, 55") and colours[1].startswith("rgba(207, 34, 46")
        images = page.locator(".renders img")
        assert images.count() == 6
        assert all(images.nth(i).evaluate("i => i.complete && i.naturalWidth") == 64 for i in range(6))
        page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
        browser.close()
    assert all(url.startswith(("file:", "data:")) for url in requests), requests
    assert (tmp_path / "report.png").stat().st_size > 10_000


@pytest.mark.browser
def test_frontend_evaluation_renders_both_pages_for_the_report(tmp_path):
    """The evaluate stage of a frontend run renders the agent's final page and the target page (real Chromium);
    the report shows them side by side."""
    from colbench_gym.rendering import RendererUnavailable, find_chromium
    from sweet_trl.pipeline import StageContext, _render_pages, write_json_atomic
    from sweet_trl.pipeline_config import RunArguments

    try:
        find_chromium()
    except RendererUnavailable as err:
        pytest.skip(str(err))
    run = RunArguments(run_dir=str(tmp_path / "run"), env_id="ColBench-Frontend-v0")
    stage_dir = tmp_path / "run" / "evaluate" / "sweet"
    stage_dir.mkdir(parents=True)
    page = "<html><body style='background:{}'><h1>{}</h1></body></html>"
    records = [
        {"episode_id": "p/0", "task_id": "p", "reward": 0.7, "answer": "Here it is:\n" + page.format("red", "Shop"),
         "task": {"ground_truth": page.format("blue", "Shop")}},
        {"episode_id": "q/0", "task_id": "q", "reward": 0.0, "answer": "I could not write it.",
         "task": {"ground_truth": page.format("green", "Blog")}},
    ]
    ctx = StageContext(stage="evaluate/sweet", dir=stage_dir, run=run, inputs={}, stream=io.StringIO())
    index = _render_pages(ctx, records, limit=6)
    assert index == "renders/index.jsonl"
    rows = [json.loads(line) for line in (stage_dir / index).read_text().splitlines()]
    assert rows[0]["agent"] == "00-agent.png" and rows[0]["target"] == "00-target.png"
    assert rows[1]["agent_error"] == "no HTML page in the answer" and rows[1]["target"] == "01-target.png"
    from PIL import Image

    agent, target = (Image.open(stage_dir / "renders" / rows[0][k]).convert("RGB") for k in ("agent", "target"))
    assert agent.getpixel((5, 5)) == (255, 0, 0) and target.getpixel((5, 5)) == (0, 0, 255)

    write_json_atomic(stage_dir / "_COMPLETE.json", {
        "stage": "evaluate", "dir": "evaluate/sweet", "seconds": 1.0, "counts": {"episodes": 2},
        "metrics": {"mean_similarity": 0.35}, "outputs": {"renders": index}, "info": {"policy": "sweet"},
        "config": [{"env_id": "ColBench-Frontend-v0"}]})
    html = build_report(tmp_path / "run").read_text()
    assert html.count("src='data:image/png;base64,") == 3 and "no HTML page in the answer" in html


def test_the_episodes_section_fills_its_slots_and_shows_an_episodes_last_record(tmp_path):
    """Six successes and one failure fill six slots (five and one); an episode retried after an infrastructure
    failure shows as its retry, not as the failure it replaced."""
    run = tmp_path / "evals"
    _marker(run, "evaluate/mine", "evaluate", 10.0, {"episodes": 7}, {"success_rate": 6 / 7},
            {"trajectories": "trajectories.jsonl"}, {"policy": "mine"})

    def episode(index, success, said):
        return {"episode_id": f"t/{index}", "task_id": "t", "reward": float(success), "success": success,
                "dialogue_history": [{"role": "user", "content": "Write it."}, {"role": "assistant", "content": said}]}

    _jsonl(run / "evaluate/mine" / "trajectories.jsonl",
           [episode(0, False, "lost to the sandbox"), *[episode(i, True, f"answer {i}") for i in range(1, 6)],
            episode(6, False, "a wrong answer"), episode(0, True, "answer 0, retried")])
    html = build_report(run).read_text()
    episodes = html.split("id='episodes'")[1].split("</section>")[0]
    assert episodes.count("class='trajectory'") == 6
    assert "answer 0, retried" in episodes and "lost to the sandbox" not in episodes
    assert "a wrong answer" in episodes  # the one failure keeps its slot
