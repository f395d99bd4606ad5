"""The trainers' precision: bf16 where the accelerator has it, float32 elsewhere, and bf16 on a CPU when asked.

TRL's configs turn an unset ``bf16`` on, which stops a CPU run before it starts ("Your setup doesn't support
bf16/gpu"). Ours turn it on only where transformers says a bf16 accelerator is present; an explicit
``bf16``/``fp16`` (``--bf16 false`` on the command line) is kept as given.

``bf16: true`` on a machine without a GPU trains on the CPU under bf16 autocast (float32 weights and optimizer
state, bf16 matrix products). A CPU with AVX512-BF16 or AMX computes those natively: on 2 cores of an AMD EPYC
(Zen 4) a LoRA step of SmolLM2-135M takes 0.70x the float32 time, and sampling in bf16 weights (generation ``dtype:
bfloat16``) 0.60x (benchmarks/bf16_cpu.py). Elsewhere the products are emulated and slower than float32, so it
stays opt-in; :func:`cpu_has_native_bf16` tells which, and ``make demo``/``make study`` ask for it where it is native:

    python -m sweet_trl.precision    # prints "--bf16 true --dtype bfloat16" on such a CPU without a GPU, else nothing
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

NATIVE_BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")


def apply_default_precision(config: Any) -> None:
    """Before ``TrainingArguments.__post_init__``: an unset ``bf16`` follows the GPU, and ``bf16`` asked for on a
    machine without a GPU runs on the CPU (transformers refuses it there unless ``use_cpu`` is set)."""
    if config.bf16 is None and not config.fp16:
        from transformers.utils import is_torch_bf16_gpu_available

        config.bf16 = is_torch_bf16_gpu_available()
    if config.bf16 and not config.use_cpu and not _has_accelerator():
        if not cpu_has_native_bf16():
            logger.warning("bf16 on a CPU without AVX512-BF16 or AMX: the products are emulated and slower than "
                           "float32 (set bf16 false)")
        config.use_cpu = True


def _has_accelerator() -> bool:
    return accelerator_device() is not None


def accelerator_device() -> str | None:
    """``"cuda"`` or ``"xpu"`` where torch sees one, else ``None`` (the CPU): where a stage without a trainer (which
    picks its device itself) puts the models it scores with."""
    import torch

    if torch.cuda.is_available():
        return "cuda"
    if hasattr(torch, "xpu") and torch.xpu.is_available():
        return "xpu"
    return None


@functools.cache
def cpu_has_native_bf16(cpuinfo: str | Path = "/proc/cpuinfo") -> bool:
    """Whether this CPU multiplies bf16 matrices in hardware (x86 AVX512-BF16 or AMX; read from Linux's cpuinfo)."""
    try:
        flags = next((line.split(":", 1)[1].split() for line in Path(cpuinfo).read_text().splitlines()
                      if line.startswith("flags")), [])
    except OSError:
        return False
    return any(flag in flags for flag in NATIVE_BF16_CPU_FLAGS)


def native_cpu_precision_args(cpuinfo: str | Path = "/proc/cpuinfo") -> list[str]:
    """The overrides that run a CPU configuration in bf16 (trainers and sampling) where this machine has no GPU and
    its CPU computes bf16 natively; none elsewhere (a GPU picks its own precision, an emulated bf16 is slower)."""
    if _has_accelerator() or not cpu_has_native_bf16(cpuinfo):
        return []
    return ["--bf16", "true", "--dtype", "bfloat16"]


if __name__ == "__main__":
    print(" ".join(native_cpu_precision_args()))
