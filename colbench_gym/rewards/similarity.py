"""Image similarity between an agent's rendered page and the target page, in [0, 1].

Two metrics, always chosen explicitly and recorded with every score:

* ``"clip"`` (:class:`~colbench_gym.rewards.clip.ClipSimilarity`): cosine similarity of CLIP image
  embeddings, the ColBench frontend reward. Needs torch, transformers and CLIP weights.
* ``"ssim"`` (:class:`SSIMSimilarity`): structural similarity of the grayscale screenshots, with
  numpy and Pillow only; for machines without CLIP weights. Its numbers are not comparable with CLIP's.

A metric never falls back to another: if CLIP cannot load, constructing it raises
:class:`SimilarityUnavailable` with the command that fixes it.

Every metric splits the work into ``features(image)`` (cached for references, keyed by the image
bytes, so each target page is embedded once) and ``compare(features_a, features_b)``::

    metric = make_similarity("ssim")
    metric.score(agent_png, target_png)          # 1.0 for the same screenshot

Images are PNG/JPEG bytes, paths, PIL images or ``uint8`` arrays, read the same way by every metric
(:func:`to_pil`): other array dtypes raise ``ValueError`` rather than being cast, and transparent
pixels are shown on white, as a browser shows a page without a background.
"""

from __future__ import annotations

import hashlib
import io
import math
import threading
from abc import ABC, abstractmethod
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np

ImageLike = bytes | bytearray | str | Path | np.ndarray | Any  # Any: a PIL.Image
METRICS = ("clip", "ssim")


class SimilarityUnavailable(RuntimeError):
    """The chosen metric cannot run here (missing package or weights); the message says how to fix it."""


def to_pil(image: ImageLike):
    """An image -> an RGB ``PIL.Image``, the one entry point of every metric (SSIM and CLIP alike).

    Accepted: PNG/JPEG bytes, a path to such a file, a PIL image, or a ``uint8`` array of shape
    ``HxW`` (gray), ``HxWx1``, ``HxWx3`` (RGB) or ``HxWx4`` (RGBA). Any other array dtype raises
    ``ValueError``: a float array has no agreed range (``[0, 1]`` or ``[0, 255]``) and casting an
    ``int64`` one wraps 300 to 44, so convert explicitly, e.g. ``(array * 255).round().astype(np.uint8)``.
    16-bit grayscale images are scaled to 8 bits; 32-bit integer and float images raise ``ValueError``.

    Transparent pixels (RGBA, LA, or a palette or gray image with a transparent colour) are
    composited onto white, the background a browser paints behind a page. Bytes that Pillow cannot
    decode (empty, corrupt, truncated, a decompression bomb) raise ``ValueError``.
    """
    from PIL import Image

    if isinstance(image, (bytes, bytearray)):
        return _flatten(_decode(bytes(image), f"{len(image)} bytes"))
    if isinstance(image, (str, Path)):
        return _flatten(_decode(Path(image).read_bytes(), str(image)))
    if isinstance(image, np.ndarray):
        return _flatten(_from_array(image))
    if isinstance(image, Image.Image):
        return _flatten(image)
    raise TypeError(f"expected image bytes, a path, a uint8 array or a PIL image, got {type(image).__name__}")


def _decode(data: bytes, what: str):
    from PIL import Image

    try:
        opened = Image.open(io.BytesIO(data))
        opened.load()  # decoding is lazy: truncated data fails here, not later inside a metric
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as err:
        raise ValueError(f"could not decode the image ({what}): {type(err).__name__}: {err}") from err
    return opened


def _from_array(array: np.ndarray):
    from PIL import Image

    if array.dtype != np.uint8:
        raise ValueError(
            f"image arrays must be uint8 in 0..255, got dtype {array.dtype}; convert explicitly, e.g. "
            "(array * 255).round().astype(np.uint8) for floats in [0, 1]")
    if array.ndim == 3 and array.shape[2] == 1:
        array = array[:, :, 0]
    if not (array.ndim == 2 or (array.ndim == 3 and array.shape[2] in (3, 4))):
        raise ValueError(f"image arrays must be HxW, HxWx1, HxWx3 or HxWx4, got shape {array.shape}")
    if array.size == 0:
        raise ValueError(f"empty image array of shape {array.shape}")
    return Image.fromarray(np.ascontiguousarray(array))


def _flatten(image):
    """RGB, with transparency composited onto white and 16-bit gray scaled to 8 bits."""
    from PIL import Image

    if image.mode.startswith("I;16"):
        image = Image.fromarray((np.asarray(image, dtype=np.float64) / 257.0).round().astype(np.uint8))
    elif image.mode in ("I", "F"):
        raise ValueError(f"{image.mode!r} images (32-bit integer or float pixels) have no fixed range; "
                         "convert them to 8 bits per channel first")
    if image.mode in ("RGBA", "LA", "PA", "RGBa", "La") or "transparency" in image.info:
        rgba = image.convert("RGBA")
        return Image.alpha_composite(Image.new("RGBA", rgba.size, (255, 255, 255, 255)), rgba).convert("RGB")
    return image.convert("RGB")


def _image_key(image: ImageLike) -> str | None:
    if isinstance(image, (bytes, bytearray)):
        return hashlib.sha256(bytes(image)).hexdigest()
    if isinstance(image, np.ndarray):
        shape = f"{image.shape}{image.dtype}".encode()
        return hashlib.sha256(np.ascontiguousarray(image).tobytes() + shape).hexdigest()
    return None


class ImageSimilarity(ABC):
    """Base class: ``score(image, reference)`` = ``compare(features(image), cached features(reference))``."""

    name: str = ""

    def __init__(self, cache_size: int = 4096):
        self.cache_size = cache_size
        self._cache: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()

    @abstractmethod
    def features(self, image: ImageLike) -> Any:
        """What ``compare`` needs from one image."""

    @abstractmethod
    def compare(self, features_a: Any, features_b: Any) -> float:
        """Similarity in [0, 1]; 1 for identical images."""

    def reference_features(self, image: ImageLike, key: str | None = None) -> Any:
        """Features of a reference image, computed once per distinct image (LRU cache)."""
        key = key or _image_key(image)
        if key is None:
            return self.features(image)
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        value = self.features(image)
        with self._lock:
            self._cache[key] = value
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return value

    def score(self, image: ImageLike, reference: ImageLike, reference_key: str | None = None) -> float:
        return float(self.compare(self.features(image), self.reference_features(reference, reference_key)))

    def describe(self) -> dict[str, Any]:
        """What to record next to a score so it can be reproduced."""
        return {"metric": self.name}

    def __repr__(self) -> str:
        details = ", ".join(f"{k}={v!r}" for k, v in self.describe().items() if k != "metric")
        return f"{type(self).__name__}({details})"


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


def make_similarity(metric: str | ImageSimilarity, **kwargs: Any) -> ImageSimilarity:
    """``"clip"`` or ``"ssim"`` (keyword arguments go to the class), or an instance, returned as is."""
    if isinstance(metric, ImageSimilarity):
        if kwargs:
            raise ValueError("keyword arguments are only used when the metric is given by name")
        return metric
    if metric == "ssim":
        return SSIMSimilarity(**kwargs)
    if metric == "clip":
        from colbench_gym.rewards.clip import ClipSimilarity

        return ClipSimilarity(**kwargs)
    raise ValueError(f"unknown similarity {metric!r}; choose one of {METRICS} or pass an ImageSimilarity")
