"""SSIM, the metric that needs no model weights: structural similarity of grayscale screenshots, with
numpy and Pillow only. Its numbers are not comparable with CLIP's."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from colbench_gym.rewards.base import ImageLike, ImageSimilarity, to_pil


def _box_sums(image: np.ndarray, size: int) -> np.ndarray:
    """Sums over every ``size`` x ``size`` window that fits inside ``image`` (integral image)."""
    padded = np.zeros((image.shape[0] + 1, image.shape[1] + 1), dtype=np.float64)
    np.cumsum(np.cumsum(image, axis=0), axis=1, out=padded[1:, 1:])
    return padded[size:, size:] - padded[:-size, size:] - padded[size:, :-size] + padded[:-size, :-size]


def ssim(a: np.ndarray, b: np.ndarray, window: int = 7, data_range: float = 255.0) -> float:
    """Mean structural similarity (Wang et al., 2004) of two equal-shape grayscale arrays.

    Uniform ``window`` x ``window`` windows and sample covariances, as in scikit-image's default
    ``structural_similarity``; windows that would cross the border are left out.
    """
    if a.shape != b.shape:
        raise ValueError(f"ssim needs equal shapes, got {a.shape} and {b.shape}")
    if min(a.shape) < window:
        raise ValueError(f"images of shape {a.shape} are smaller than the {window}x{window} window")
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    n = window * window
    mean_a, mean_b = _box_sums(a, window) / n, _box_sums(b, window) / n
    unbiased = n / (n - 1)
    var_a = (_box_sums(a * a, window) / n - mean_a**2) * unbiased
    var_b = (_box_sums(b * b, window) / n - mean_b**2) * unbiased
    cov = (_box_sums(a * b, window) / n - mean_a * mean_b) * unbiased
    c1, c2 = (0.01 * data_range) ** 2, (0.03 * data_range) ** 2
    numerator = (2 * mean_a * mean_b + c1) * (2 * cov + c2)
    denominator = (mean_a**2 + mean_b**2 + c1) * (var_a + var_b + c2)
    return float(np.mean(numerator / denominator))


class SSIMSimilarity(ImageSimilarity):
    """Weight-free similarity: SSIM of grayscale screenshots scaled to ``width`` pixels wide.

    Both screenshots are scaled to the same width keeping their aspect ratio (area averaging);
    the shorter one is then extended downwards by repeating its last row, as a taller browser
    window would show more page background. So an extra paragraph at the bottom costs little and
    a page of the wrong length costs in proportion. Scores below 0 are clipped to 0.

    Images taller than ``MAX_ASPECT`` (16) times their width keep only their top part, so the scaled
    image has at most ``16 * width`` rows (4096 at the default width): a renderer screenshot (1280
    wide, at most 4096 rows) is never cut, and a degenerate 5000x1 image cannot blow up to 1.28M x 256.
    Inputs are read by :func:`to_pil` (uint8 arrays only; transparency on white).

    The floor is high: most of a web page is background, and a background matches a background. Through
    ``gym.make("ColBench-Frontend-v0", similarity="ssim")``, an empty page (``<html><body></body></html>``) scores
    0.614 on average against the 25 built-in target pages (median 0.638, from 0.205 to 0.845), one line of text on
    white the same (0.613), a black page 0.001. An RL reward from this metric starts near 0.6 for an answer that
    does nothing: compare policies by their gain over that (or over zero-shot), never against 0.
    """

    name = "ssim"
    MAX_ASPECT = 16
    """Most rows per column kept before scaling: 5x a 1280x4096 screenshot's 3.2."""

    def __init__(self, width: int = 256, window: int = 7, cache_size: int = 4096):
        super().__init__(cache_size)
        if width < window:
            raise ValueError(f"width must be at least the window size {window}")
        self.width = width
        self.window = window

    def features(self, image: ImageLike) -> np.ndarray:
        from PIL import Image

        gray = to_pil(image).convert("L")
        max_rows = self.MAX_ASPECT * self.width
        # Crop before scaling so that the resize itself never allocates more than max_rows x width.
        kept_rows = min(gray.height, math.ceil(max_rows * gray.width / self.width))
        if kept_rows < gray.height:
            gray = gray.crop((0, 0, gray.width, kept_rows))
        height = min(max_rows, max(self.window, round(gray.height * self.width / gray.width)))
        return np.asarray(gray.resize((self.width, height), Image.Resampling.BOX), dtype=np.float64)

    def compare(self, features_a: np.ndarray, features_b: np.ndarray) -> float:
        rows = max(features_a.shape[0], features_b.shape[0])
        a = np.pad(features_a, ((0, rows - features_a.shape[0]), (0, 0)), mode="edge")
        b = np.pad(features_b, ((0, rows - features_b.shape[0]), (0, 0)), mode="edge")
        return float(np.clip(ssim(a, b, self.window), 0.0, 1.0))

    def describe(self) -> dict[str, Any]:
        return {"metric": self.name, "width": self.width, "window": self.window}
