"""Image similarity (SSIM, CLIP with a tiny random model), its cache, and the win rate."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from colbench_gym.rewards import (
    SimilarityUnavailable,
    SSIMSimilarity,
    make_similarity,
    per_task_scores,
    ssim,
    win_rate,
)


def page(height: int = 800, header=(16, 185, 129), body=(243, 244, 246), blocks: int = 3) -> np.ndarray:
    """A synthetic screenshot: coloured header, grey body, dark text-like bars."""
    image = np.empty((height, 1280, 3), np.uint8)
    image[:] = body
    image[:96] = header
    for index in range(blocks):
        top = 160 + index * 140
        image[top:top + 18, 120:900] = (40, 40, 40)
        image[top + 30:top + 44, 120:1100] = (90, 90, 90)
    return image


def naive_ssim(a: np.ndarray, b: np.ndarray, window: int = 7) -> float:
    a, b = a.astype(np.float64), b.astype(np.float64)
    c1, c2, values = (0.01 * 255) ** 2, (0.03 * 255) ** 2, []
    for i in range(a.shape[0] - window + 1):
        for j in range(a.shape[1] - window + 1):
            x, y = a[i:i + window, j:j + window].ravel(), b[i:i + window, j:j + window].ravel()
            cov = np.cov(x, y)  # sample (n - 1) covariances, like scikit-image
            values.append(((2 * x.mean() * y.mean() + c1) * (2 * cov[0, 1] + c2))
                          / ((x.mean() ** 2 + y.mean() ** 2 + c1) * (cov[0, 0] + cov[1, 1] + c2)))
    return float(np.mean(values))


def test_ssim_matches_the_definition():
    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, (20, 24)).astype(np.float64)
    b = np.clip(a + rng.normal(0, 40, a.shape), 0, 255)
    assert ssim(a, b) == pytest.approx(naive_ssim(a, b), abs=1e-9)
    assert ssim(a, a) == pytest.approx(1.0, abs=1e-12)
    with pytest.raises(ValueError, match="equal shapes"):
        ssim(a, b[:10])


def test_ssim_similarity_orders_pages_sensibly():
    metric = SSIMSimilarity()
    target = page()
    assert metric.score(target, target) == pytest.approx(1.0, abs=1e-9)
    recoloured = page(header=(59, 130, 246))
    longer = page(height=1000, blocks=5)
    unrelated = page(header=(0, 0, 0), body=(20, 20, 20), blocks=0)
    scores = {name: metric.score(image, target)
              for name, image in [("recoloured", recoloured), ("longer", longer), ("unrelated", unrelated)]}
    assert all(0.0 <= value < 1.0 for value in scores.values())
    assert scores["unrelated"] < scores["longer"] and scores["unrelated"] < scores["recoloured"]
    png = _png(target)
    assert metric.score(png, png) == pytest.approx(1.0, abs=1e-9)  # bytes work too


def _png(array: np.ndarray) -> bytes:
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="PNG")
    return buffer.getvalue()


def test_reference_features_are_cached_per_image():
    class Counting(SSIMSimilarity):
        calls = 0

        def features(self, image):
            Counting.calls += 1
            return super().features(image)

    metric = Counting(cache_size=2)
    target, other = _png(page()), _png(page(header=(1, 2, 3)))
    for _ in range(3):
        metric.score(other, target)
    assert Counting.calls == 3 + 1  # the agent image every time, the target once
    metric.score(other, target, reference_key="task-1")
    metric.score(other, target, reference_key="task-1")
    assert Counting.calls == 3 + 1 + 2 + 1


def test_metric_choice_is_explicit():
    assert make_similarity("ssim").describe() == {"metric": "ssim", "width": 256, "window": 7}
    with pytest.raises(ValueError, match="unknown similarity"):
        make_similarity("l2")
    with pytest.raises(SimilarityUnavailable, match="ssim"):
        make_similarity("clip", model="/nonexistent/clip-folder")


def _png_of(array: np.ndarray, mode: str | None = None, **save) -> bytes:
    import io

    from PIL import Image

    buffer = io.BytesIO()
    (Image.fromarray(array, mode) if mode else Image.fromarray(array)).save(buffer, format="PNG", **save)
    return buffer.getvalue()


def test_image_arrays_must_be_uint8():
    """Other dtypes were cast silently: white floats in [0, 1] became black, int64 300 wrapped to 44, NaN to 0."""
    metric = SSIMSimilarity()
    white = np.full((64, 96, 3), 255, np.uint8)
    for bad in (np.ones((64, 96, 3)), np.full((64, 96, 3), 300, np.int64), np.full((64, 96, 3), np.nan),
                np.ones((64, 96, 3), bool)):
        with pytest.raises(ValueError, match="uint8"):
            metric.score(bad, white)
        with pytest.raises(ValueError, match="uint8"):
            metric.score(white, bad)
    with pytest.raises(ValueError, match="shape"):
        metric.score(np.zeros((64, 96, 2), np.uint8), white)
    with pytest.raises(ValueError, match="empty"):
        metric.score(np.zeros((0, 96, 3), np.uint8), white)
    # gray HxW and HxWx1 arrays are the same picture as their RGB version
    gray = page()[:, :, 1]
    rgb = np.repeat(gray[:, :, None], 3, axis=2)
    assert metric.score(gray, rgb) == 1.0 and metric.score(gray[:, :, None], rgb) == 1.0


def test_transparency_is_shown_on_white():
    metric = SSIMSimilarity()
    white, black = np.full((80, 128, 3), 255, np.uint8), np.zeros((80, 128, 3), np.uint8)
    clear_rgba = np.zeros((80, 128, 4), np.uint8)  # fully transparent black
    assert metric.score(_png_of(clear_rgba), _png_of(white)) == 1.0
    assert metric.score(_png_of(clear_rgba), _png_of(black)) < 0.01
    assert metric.score(clear_rgba, white) == 1.0  # RGBA arrays too
    assert metric.score(_png_of(np.zeros((80, 128, 2), np.uint8), "LA"), white) == 1.0
    assert metric.score(_png_of(black[:, :, 0], transparency=0), white) == 1.0  # gray with a transparent colour
    from PIL import Image

    palette = Image.fromarray(black).convert("P")
    palette.info["transparency"] = palette.getpixel((0, 0))
    assert metric.score(palette, white) == 1.0
    # an opaque RGBA screenshot is the same page as its RGB version
    target = page()
    opaque = np.dstack([target, np.full(target.shape[:2], 255, np.uint8)])
    assert metric.score(_png_of(opaque), _png_of(target)) == 1.0
    half = np.dstack([black, np.full((80, 128), 128, np.uint8)])  # black at half opacity: mid gray
    assert metric.score(half, np.full((80, 128, 3), 127, np.uint8)) > 0.99


def test_sixteen_bit_gray_is_scaled_not_clipped():
    metric = SSIMSimilarity()
    deep = np.zeros((64, 96), np.uint16)
    deep[:, 48:] = 40000  # 40000 / 257 = 155.6
    shallow = np.zeros((64, 96), np.uint8)
    shallow[:, 48:] = 156
    assert metric.score(_png_of(deep), shallow) == 1.0
    assert metric.score(_png_of(deep), np.where(shallow > 0, 255, 0).astype(np.uint8)) < 0.999


def test_undecodable_bytes_raise_value_error(tmp_path):
    metric = SSIMSimilarity()
    good = _png_of(page())
    for bad in (b"", b"\x89PNG\r\n\x1a\nnonsense", good[: len(good) // 2]):
        with pytest.raises(ValueError, match="could not decode"):
            metric.score(bad, good)
    path = tmp_path / "page.png"
    path.write_bytes(good)
    assert metric.score(str(path), good) == 1.0 and metric.score(path, good) == 1.0
    with pytest.raises(FileNotFoundError):
        metric.score(tmp_path / "missing.png", good)


def test_resizing_is_bounded():
    """A 5000x1 image used to be scaled to 1,280,000x256 float64 rows (10 GB)."""
    metric = SSIMSimilarity()
    cap = 16 * metric.width  # the documented bound: 4096 rows at the default width
    assert metric.features(np.zeros((100, 1, 3), np.uint8)).shape == (cap, metric.width)  # was 25600 rows
    sliver = np.zeros((5000, 1, 3), np.uint8)
    assert metric.features(sliver).shape == (cap, metric.width)
    assert 0.0 <= metric.score(sliver, page()) < 0.01
    # the renderer's tallest screenshot (1280 x 4096) is scaled whole, never cut
    tallest = np.zeros((4096, 1280), np.uint8)
    tallest[-8:] = 255
    features = metric.features(tallest)
    assert features.shape == (819, metric.width) and features[-1].mean() > 200
    # above the cap only the top is kept, at the same scale as the page's top
    very_tall = np.zeros((cap * 5 + 500, metric.width), np.uint8)
    assert np.array_equal(metric.features(very_tall), metric.features(very_tall[:cap]))
    assert metric.features(np.zeros((1, 100_000, 3), np.uint8)).shape == (metric.window, metric.width)


# -- CLIP with a tiny random model (no weights can be downloaded in tests) --------------------------

@pytest.fixture(scope="module")
def tiny_clip_dir(tmp_path_factory):
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    config = transformers.CLIPConfig(
        text_config={"vocab_size": 99, "hidden_size": 32, "intermediate_size": 37, "num_hidden_layers": 2,
                         "num_attention_heads": 4, "max_position_embeddings": 32, "bos_token_id": 0, "eos_token_id": 1,
                         "pad_token_id": 1},
        vision_config={"hidden_size": 32, "intermediate_size": 37, "num_hidden_layers": 2, "num_attention_heads": 4,
                           "image_size": 32, "patch_size": 8},
        projection_dim=16,
    )
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("tiny-clip")
    transformers.CLIPModel(config).save_pretrained(folder)
    processor_class = getattr(transformers, "CLIPImageProcessorPil", None) or transformers.CLIPImageProcessor
    processor_class(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}).save_pretrained(folder)
    return folder


def test_clip_similarity_from_a_local_folder(tiny_clip_dir):
    metric = make_similarity("clip", model=str(tiny_clip_dir))
    target, other = page(), page(header=(200, 30, 30), body=(10, 10, 10), blocks=0)
    assert metric.score(target, target) == pytest.approx(1.0, abs=1e-5)
    assert metric.score(other, target) < 0.999
    embedding = metric.features(target)
    assert embedding.shape == (16,) and np.linalg.norm(embedding) == pytest.approx(1.0, abs=1e-5)
    assert metric.describe()["metric"] == "clip" and metric.describe()["model"] == str(tiny_clip_dir)
    # the whole page counts: a change at the very bottom of a tall page moves the embedding
    tall = page(height=3000)
    changed = tall.copy()
    changed[-400:] = (255, 0, 0)
    assert metric.score(changed, tall) < 0.9999
    cropped = make_similarity("clip", model=str(tiny_clip_dir), crop=True)
    assert cropped.score(changed, tall) == pytest.approx(1.0, abs=1e-6)  # centre crop ignores the bottom
    # A strip 1 pixel tall is cut to its centre before the crop's resize (which would be 32 x 40960 here).
    strip = np.zeros((1, 1280, 3), np.uint8)
    strip[0, 620:660] = 255
    assert cropped.score(strip, strip) == pytest.approx(1.0, abs=1e-5)
    from PIL import Image

    from colbench_gym.rewards.clip import _limit_aspect

    assert _limit_aspect(Image.fromarray(strip)).size == (16, 1)
    assert _limit_aspect(Image.fromarray(tall)).size == Image.fromarray(tall).size  # 3.2:1 is left whole


def test_clip_reads_images_like_ssim(tiny_clip_dir):
    """Both metrics read images through to_pil: same dtypes refused, same transparency rule."""
    metric = make_similarity("clip", model=str(tiny_clip_dir))
    white = np.full((80, 128, 3), 255, np.uint8)
    for bad in (np.ones((80, 128, 3)), np.full((80, 128, 3), 300, np.int64), np.full((80, 128, 3), np.nan)):
        with pytest.raises(ValueError, match="uint8"):
            metric.score(bad, white)
    with pytest.raises(ValueError, match="could not decode"):
        metric.score(b"\x89PNGxx", _png_of(white))
    clear = _png_of(np.zeros((80, 128, 4), np.uint8))
    assert np.array_equal(metric.features(clear), metric.features(white))
    assert metric.score(clear, _png_of(white)) == pytest.approx(1.0, abs=1e-6)


def test_open_clip_backend_explains_itself_when_unavailable():
    try:
        import open_clip  # noqa: F401
    except Exception:  # noqa: BLE001
        with pytest.raises(SimilarityUnavailable, match="torchvision"):
            make_similarity("clip", backend="open_clip")
    else:
        pytest.skip("open_clip is installed here")


def test_clip_extra_does_not_break_transformers():
    """The ``clip`` extra is transformers + pillow; `import transformers` must work, torchvision or not."""
    code = (
        "import importlib.util, json\n"
        "import transformers, PIL\n"
        "from transformers import CLIPModel\n"
        "spec = importlib.util.find_spec('torchvision')\n"
        "ok = True\n"
        "if spec is not None:\n"
        "    import torchvision\n"
        "from colbench_gym.rewards import ClipSimilarity\n"
        "print(json.dumps({'torchvision': spec is not None, 'transformers': transformers.__version__}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    assert facts["transformers"]


# -- win rate ---------------------------------------------------------------------------------------

def test_win_rate_counts_ties_half():
    result = win_rate({"a": 0.9, "b": 0.5, "c": 0.7, "d": 0.1}, {"a": 0.8, "b": 0.6, "c": 0.7, "e": 1.0})
    assert (result.wins, result.ties, result.losses, result.tasks) == (1, 1, 1, 3)
    assert result.win_rate == pytest.approx(0.5)
    assert result.missing_in_run == 1 and result.missing_in_reference == 1
    assert result.per_task == {"a": 1.0, "b": 0.0, "c": 0.5}


def test_win_rate_from_records_and_files(tmp_path):
    records = [
        {"task_id": "t1", "reward": 0.8, "similarity": 0.8},
        {"task_id": "t1", "reward": 0.6, "similarity": 0.6},
        {"task": {"task_id": "t2"}, "reward": 0.3},
    ]
    assert per_task_scores(records) == {"t1": pytest.approx(0.7), "t2": 0.3}
    path = tmp_path / "run.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    result = win_rate(path, {"t1": 0.7, "t2": 0.2})
    assert (result.wins, result.ties, result.losses) == (1, 1, 0)
    with pytest.raises(ValueError, match="no task in common"):
        win_rate({"x": 1.0}, {"y": 1.0})
    with pytest.raises(ValueError, match="similarity"):
        per_task_scores([{"task_id": "x"}])


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), "0.9", None, True, [0.9]])
def test_win_rate_refuses_scores_that_are_not_finite_numbers(bad):
    """A NaN used to count as a tie (0.75 below) and "0.9" as a score."""
    with pytest.raises(ValueError, match="task 'a'"):
        win_rate({"a": bad, "b": 0.5}, {"a": 0.9, "b": 0.4})
    with pytest.raises(ValueError, match="task 'a'"):
        win_rate({"a": 0.9, "b": 0.5}, {"a": bad, "b": 0.4})
    if bad is not None:  # in a record, a None similarity means "use the reward"
        with pytest.raises(ValueError, match="task 'a'.*'similarity'"):
            per_task_scores([{"task_id": "a", "similarity": bad, "reward": 0.2}])


def test_win_rate_records_and_files_are_checked(tmp_path):
    assert per_task_scores([{"task_id": "a", "similarity": None, "reward": 0.7}]) == {"a": 0.7}
    assert per_task_scores({"a": np.float32(0.5), "b": 1}) == {"a": 0.5, "b": 1.0}
    path = tmp_path / "run.jsonl"
    path.write_text('{"task_id": "a", "similarity": 0.9}\n{"task_id": "a", "similarity": NaN}\n')
    with pytest.raises(ValueError, match="task 'a'"):
        win_rate(path, {"a": 0.5})
    path.write_text('{"task_id": "a", "similarity": 0.9}\n{"task_id": "a", "simil\n')
    with pytest.raises(ValueError, match="line 2"):
        per_task_scores(path)
    with pytest.raises(ValueError, match="same task '1'"):
        win_rate({1: 0.9, "1": 0.1}, {"1": 0.5})
    with pytest.raises(TypeError, match="str"):
        win_rate(["a"], {"a": 0.5})


def test_tie_tolerance_must_be_finite_and_not_negative():
    ours, theirs = {"a": 0.5, "b": 0.9}, {"a": 0.5, "b": 0.4}
    for bad in (-1.0, -1e-9, float("nan"), float("inf"), True):
        with pytest.raises(ValueError, match="tie_tolerance"):
            win_rate(ours, theirs, tie_tolerance=bad)
    exact = win_rate(ours, theirs, tie_tolerance=0)
    assert (exact.wins, exact.ties, exact.losses) == (1, 1, 0)
    loose = win_rate(ours, theirs, tie_tolerance=0.5)
    assert (loose.wins, loose.ties, loose.losses) == (0, 2, 0) and loose.win_rate == 0.5
