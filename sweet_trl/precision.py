"""The trainers' default precision: bf16 where the accelerator has it, float32 elsewhere.

TRL's configs turn an unset ``bf16`` on, which stops a CPU run before it starts ("Your setup doesn't support
bf16/gpu"). Ours turn it on only where transformers says a bf16 accelerator is present; an explicit
``bf16``/``fp16`` (``--bf16 false`` on the command line) is kept as given.
"""

from __future__ import annotations


def default_bf16(bf16: bool | None, fp16: bool) -> bool | None:
    if bf16 is not None or fp16:
        return bf16
    from transformers.utils import is_torch_bf16_gpu_available

    return is_torch_bf16_gpu_available()
