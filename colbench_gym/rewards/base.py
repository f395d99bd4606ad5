"""What every image-similarity metric shares: the ``features``/``compare`` protocol with its cache of
reference features, one way to read images, and the error a metric raises when it cannot run here.

Images are PNG/JPEG bytes, paths, PIL images or ``uint8`` arrays, read the same way by every metric
(:func:`to_pil`): other array dtypes raise ``ValueError`` rather than being cast, and transparent
pixels are shown on white, as a browser shows a page without a background.
"""

from __future__ import annotations

import hashlib
import io
import threading
from abc import ABC, abstractmethod
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np

ImageLike = bytes | bytearray | str | Path | np.ndarray | Any  # Any: a PIL.Image


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
