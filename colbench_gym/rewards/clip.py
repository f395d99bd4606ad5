"""CLIP image-embedding similarity, the ColBench frontend reward.

    from colbench_gym.rewards import ClipSimilarity
    metric = ClipSimilarity()                                   # openai/clip-vit-base-patch32 (HF cache)
    metric = ClipSimilarity("/models/clip-vit-base-patch32")    # a local save_pretrained() folder
    metric = ClipSimilarity(backend="open_clip")                # open_clip ViT-B-32, pretrained="openai"
    metric.score(agent_png, target_png)                          # cosine of the two embeddings, in [0, 1]

Weights: the default loader is transformers' ``CLIPModel`` with its PIL image processor, so
torchvision is not needed. Get the weights once, on a machine with network access::

    hf download openai/clip-vit-base-patch32        # then HF_HUB_OFFLINE=1 works
    # or: python -c "from transformers import CLIPModel, CLIPImageProcessor as P; \
    #     CLIPModel.from_pretrained('openai/clip-vit-base-patch32').save_pretrained('DIR'); \
    #     P.from_pretrained('openai/clip-vit-base-patch32').save_pretrained('DIR')"

open_clip imports torchvision. Some platforms only offer torchvision builds that do not match the
installed torch (for example a CUDA-only wheel next to CPU torch), and a torchvision that fails to
import also breaks ``import transformers``. Use open_clip only where a matching torchvision is
installed (CPU wheels: ``pip install torchvision --index-url https://download.pytorch.org/whl/cpu``);
otherwise keep the transformers backend, which gives the same OpenAI ViT-B/32 weights.

Preprocessing: the whole screenshot is resized to the model's square input (no centre crop, so a
tall page's header and footer count; ``crop=True`` restores CLIP's resize-and-centre-crop).
Negative cosines are clipped to 0 so the reward stays in [0, 1].
"""

from __future__ import annotations

import threading
from typing import Any, Literal

import numpy as np

from colbench_gym.rewards.base import ImageLike, ImageSimilarity, SimilarityUnavailable, to_pil

DEFAULT_CLIP_MODEL = "openai/clip-vit-base-patch32"
OPEN_CLIP_DEFAULT = ("ViT-B-32", "openai")


def _require(module: str, hint: str):
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise SimilarityUnavailable(f"CLIP similarity needs {module!r}: {hint} (or pass similarity='ssim').") from err


class ClipSimilarity(ImageSimilarity):
    """Cosine similarity of L2-normalised CLIP image embeddings.

    Args:
        model: Hub id or local folder (transformers backend), or an open_clip model name.
        backend: ``"transformers"`` (default) or ``"open_clip"``.
        pretrained: open_clip weights tag (default ``"openai"``).
        device: torch device; default CPU (``"cuda"`` when you have one).
        model_obj, processor: an already-built ``CLIPModel`` (or ``CLIPVisionModelWithProjection``) and
            image processor, instead of loading (tests build tiny random ones).
        crop: use CLIP's resize-shortest-side-and-centre-crop instead of resizing the whole page.
    """

    name = "clip"

    def __init__(
        self,
        model: str = DEFAULT_CLIP_MODEL,
        backend: Literal["transformers", "open_clip"] = "transformers",
        pretrained: str | None = None,
        device: str | None = None,
        revision: str | None = None,
        model_obj: Any = None,
        processor: Any = None,
        crop: bool = False,
        cache_size: int = 4096,
    ):
        super().__init__(cache_size)
        if backend not in ("transformers", "open_clip"):
            raise ValueError(f"backend must be 'transformers' or 'open_clip', got {backend!r}")
        self.torch = _require("torch", "install a torch build first (https://pytorch.org), "
                                       "then pip install 'colbench-gym[clip]'")
        self.model_name = model if model_obj is None else getattr(model_obj, "name_or_path", "custom") or "custom"
        self.backend = backend
        self.crop = crop
        self.device = device or "cpu"
        self._model_lock = threading.Lock()
        if backend == "open_clip":
            self._load_open_clip(model if model != DEFAULT_CLIP_MODEL else OPEN_CLIP_DEFAULT[0],
                                 pretrained or OPEN_CLIP_DEFAULT[1], model_obj, processor)
        else:
            self._load_transformers(model, revision, model_obj, processor)

    # -- loading ----------------------------------------------------------------------------
    def _load_transformers(self, model: str, revision: str | None, model_obj: Any, processor: Any) -> None:
        transformers = _require("transformers", "pip install 'colbench-gym[clip]'")
        if model_obj is None:
            try:
                model_obj = transformers.CLIPModel.from_pretrained(model, revision=revision)
            except (OSError, ValueError) as err:
                raise SimilarityUnavailable(
                    f"CLIP weights {model!r} are not available here ({type(err).__name__}: "
                    f"{str(err).splitlines()[0][:200]}). Download them once with `hf download {model}` on a "
                    "machine with network access (then HF_HUB_OFFLINE=1 works), or pass a local folder with "
                    "similarity_kwargs={'model': PATH}, or choose similarity='ssim' explicitly."
                ) from err
        if processor is None:
            # transformers >= 5 splits the processor by backend; the PIL one needs no torchvision.
            processor_class = getattr(transformers, "CLIPImageProcessorPil", None) or transformers.CLIPImageProcessor
            source = model if model_obj is None or not getattr(model_obj, "name_or_path", "") else model_obj.name_or_path
            try:
                processor = processor_class.from_pretrained(source, revision=revision)
            except (OSError, ValueError) as err:
                raise SimilarityUnavailable(
                    f"the CLIP image processor config for {source!r} is missing ({str(err).splitlines()[0][:200]}); "
                    f"save it next to the weights (CLIPImageProcessor.from_pretrained(...).save_pretrained(DIR))"
                ) from err
        self.model = model_obj.to(self.device).eval()
        self.processor = processor
        self._input_size = self._input_side(self.model, processor)

    def _load_open_clip(self, name: str, pretrained: str, model_obj: Any, preprocess: Any) -> None:
        try:
            open_clip = __import__("open_clip")
        except Exception as err:  # a broken torchvision raises more than ImportError
            raise SimilarityUnavailable(
                f"open_clip could not be imported ({type(err).__name__}: {err}). It needs a torchvision "
                "that matches your torch (CPU: pip install torchvision --index-url "
                "https://download.pytorch.org/whl/cpu). Or use backend='transformers' (the default), "
                "which loads the same OpenAI ViT-B/32 weights without torchvision."
            ) from err
        if model_obj is None:
            try:
                model_obj, _, preprocess = open_clip.create_model_and_transforms(name, pretrained=pretrained)
            except Exception as err:
                raise SimilarityUnavailable(f"open_clip could not load {name}/{pretrained}: {err}") from err
        self.model_name = f"{name}/{pretrained}"
        self.model = model_obj.to(self.device).eval()
        self.processor = preprocess

    @staticmethod
    def _input_side(model: Any, processor: Any) -> int:
        """The square input side the vision tower expects (its config, else the processor's crop)."""
        config = getattr(model, "config", None)
        vision = getattr(config, "vision_config", config)
        if getattr(vision, "image_size", None):
            return int(vision.image_size)
        crop = getattr(processor, "crop_size", None)
        height = crop.get("height") if hasattr(crop, "get") else getattr(crop, "height", None)
        return int(height or 224)

    # -- features -----------------------------------------------------------------------------
    def _pixel_values(self, images: list) -> Any:
        if self.crop:
            images = [_limit_aspect(image) for image in images]
        if self.backend == "open_clip":
            if not self.crop:
                size = getattr(getattr(self.model, "visual", None), "image_size", 224)
                size = size[0] if isinstance(size, (tuple, list)) else size
                images = [image.resize((size, size)) for image in images]
            return self.torch.stack([self.processor(image) for image in images])
        kwargs: dict[str, Any] = {"return_tensors": "pt"}
        if not self.crop:
            side = self._input_size
            kwargs.update(do_center_crop=False, size={"height": side, "width": side})
        return self.processor(images=images, **kwargs)["pixel_values"]

    def _embed(self, pixel_values: Any) -> Any:
        if self.backend == "open_clip":
            return self.model.encode_image(pixel_values)
        if hasattr(self.model, "get_image_features"):
            output = self.model.get_image_features(pixel_values=pixel_values)
        else:  # CLIPVisionModelWithProjection
            output = self.model(pixel_values=pixel_values)
        if isinstance(output, self.torch.Tensor):
            return output
        # transformers >= 5 returns a model output whose pooled output is the projected embedding.
        for name in ("image_embeds", "pooler_output"):
            value = getattr(output, name, None)
            if value is not None:
                return value
        raise TypeError(f"unexpected CLIP output {type(output).__name__}")

    def features_many(self, images: list[ImageLike]) -> np.ndarray:
        pil_images = [to_pil(image) for image in images]
        with self._model_lock, self.torch.inference_mode():
            pixel_values = self._pixel_values(pil_images).to(self.device)
            embeddings = self._embed(pixel_values).float()
            embeddings = embeddings / embeddings.norm(dim=-1, keepdim=True).clamp_min(1e-12)
        return embeddings.cpu().numpy()

    def features(self, image: ImageLike) -> np.ndarray:
        return self.features_many([image])[0]

    def compare(self, features_a: np.ndarray, features_b: np.ndarray) -> float:
        return float(np.clip(np.dot(features_a, features_b), 0.0, 1.0))

    def describe(self) -> dict[str, Any]:
        return {"metric": self.name, "model": self.model_name, "backend": self.backend, "crop": self.crop}


def _limit_aspect(image: Any, max_aspect: int = 16) -> Any:
    """CLIP's crop keeps the centre square after resizing the short side to the input size: an extreme strip
    (a 1-pixel-tall screenshot) is first cut to its centre, so that the resize before the crop stays small."""
    width, height = image.size
    longest = max_aspect * max(1, min(width, height))
    if width > longest:
        left = (width - longest) // 2
        return image.crop((left, 0, left + longest, height))
    if height > longest:
        top = (height - longest) // 2
        return image.crop((0, top, width, top + longest))
    return image
