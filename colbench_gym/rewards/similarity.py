"""Image similarity between an agent's rendered page and the target page, in [0, 1].

Two metrics, always chosen explicitly and recorded with every score:

* ``"clip"`` (:class:`~colbench_gym.rewards.clip.ClipSimilarity`): cosine similarity of CLIP image
  embeddings, the ColBench frontend reward. Needs torch, transformers and CLIP weights.
* ``"ssim"`` (:class:`~colbench_gym.rewards.structural.SSIMSimilarity`): structural similarity of the
  grayscale screenshots, with numpy and Pillow only; for machines without CLIP weights. Its numbers are
  not comparable with CLIP's.

A metric never falls back to another: if CLIP cannot load, constructing it raises
:class:`SimilarityUnavailable` with the command that fixes it.

Every metric splits the work into ``features(image)`` (cached for references, keyed by the image
bytes, so each target page is embedded once) and ``compare(features_a, features_b)``::

    metric = make_similarity("ssim")
    metric.score(agent_png, target_png)          # 1.0 for the same screenshot

Images are read the same way by every metric (:func:`~colbench_gym.rewards.base.to_pil`). The protocol
(:class:`ImageSimilarity`) lives in :mod:`colbench_gym.rewards.base`, SSIM in
:mod:`colbench_gym.rewards.structural` and CLIP in :mod:`colbench_gym.rewards.clip`, none of which
imports another metric; this module picks one by name and offers the shared names as well.
"""

from __future__ import annotations

from typing import Any

from colbench_gym.rewards.base import ImageLike, ImageSimilarity, SimilarityUnavailable, to_pil
from colbench_gym.rewards.clip import ClipSimilarity
from colbench_gym.rewards.structural import SSIMSimilarity, ssim

METRICS = ("clip", "ssim")

__all__ = [
    "METRICS", "ImageLike", "ImageSimilarity", "SSIMSimilarity", "SimilarityUnavailable", "make_similarity", "ssim",
    "to_pil",
]


def make_similarity(metric: str | ImageSimilarity, **kwargs: Any) -> ImageSimilarity:
    """``"clip"`` or ``"ssim"`` (keyword arguments go to the class), or an instance, returned as is."""
    if isinstance(metric, ImageSimilarity):
        if kwargs:
            raise ValueError("keyword arguments are only used when the metric is given by name")
        return metric
    if metric == "ssim":
        return SSIMSimilarity(**kwargs)
    if metric == "clip":
        return ClipSimilarity(**kwargs)
    raise ValueError(f"unknown similarity {metric!r}; choose one of {METRICS} or pass an ImageSimilarity")
