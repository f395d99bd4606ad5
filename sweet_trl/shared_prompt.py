"""One backbone pass over what a preference pair's two sequences have in common, instead of one per sequence.

TRL's ``DPOTrainer`` (and the critic trainer built on it) lays a batch of B pairs out as 2B rows, ``[prompt_i +
chosen_i]`` then ``[prompt_i + rejected_i]``, and runs the model over every row: each prompt token goes through the
policy's forward, its backward and the reference's forward twice. Turn-level pairs are mostly prompt (the dialogue so
far) and little message; in the CPU demo's 176 pairs, 186 prompt tokens to 50 message tokens, so the rows hold 472
tokens where 286 are distinct. A critic pair's two trajectories share the system prompt, the privileged reference
and the request.

:func:`shared_prompt_backbone` runs each pair's common start once, with a key-value cache, and continues both rows
from it. With causal attention a position never sees what follows, so the hidden states it returns are those of the
plain pass (to float rounding); the trainer's LM head, loss, metrics and gradients then run unchanged on them. A
batch laid out otherwise, a backbone call with arguments this module does not know, or a backbone that recomputes
activations (gradient checkpointing turns the cache off) takes the plain pass.

    with shared_prompt_backbone([policy, reference], inputs):
        loss = dpo_trainer.compute_loss(policy, inputs)
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from colbench_gym._optional import require
from sweet_trl.transformers_compat import returned_cache, with_cache

torch = require("torch", "train")
BaseModelOutputWithPast = require("transformers.modeling_outputs", "train").BaseModelOutputWithPast

# What TRL's fused LM head passes the backbone besides the batch (PEFT adds its unset options as None or False);
# any other argument means a call this module does not know, which runs plainly.
_KNOWN_KWARGS = {"use_cache", "return_dict"}


def shared_prompt_lengths(inputs: Mapping[str, torch.Tensor]) -> list[int] | None:
    """Per pair (rows i and i + B of 2B right-padded rows), how many leading tokens its two rows have in common: the
    prompt, and the messages' common start if they have one. Each row keeps at least one token of its own. ``None``
    when the row count is odd, a row is not right-padded or some pair has no token in common."""
    input_ids, attention_mask = inputs.get("input_ids"), inputs.get("attention_mask")
    if input_ids is None or attention_mask is None or input_ids.dim() != 2 or attention_mask.shape != input_ids.shape:
        return None
    rows = input_ids.shape[0]
    if rows == 0 or rows % 2:
        return None
    ends = attention_mask.sum(dim=1).tolist()
    if any(not attention_mask[row, :end].all() for row, end in enumerate(ends)):
        return None
    half, lengths = rows // 2, []
    for first, second in zip(range(half), range(half, rows)):
        length = min(ends[first], ends[second]) - 1
        differ = (input_ids[first, :length] != input_ids[second, :length]).nonzero()
        length = int(differ[0]) if len(differ) else length
        if length < 1:
            return None
        lengths.append(length)
    return lengths


def backbone_of(model: Any) -> torch.nn.Module | None:
    """The transformer stack under a causal LM (``model.model`` for Llama), through PEFT and accelerate wrappers."""
    model = getattr(model, "module", model)  # DistributedDataParallel
    if hasattr(model, "get_base_model"):
        model = model.get_base_model()
    backbone = getattr(model, "base_model", None)
    return backbone if isinstance(backbone, torch.nn.Module) and backbone is not model else None


@contextlib.contextmanager
def shared_prompt_backbone(models: Iterable[Any], inputs: Mapping[str, torch.Tensor]) -> Iterator[bool]:
    """While open, the backbones of ``models`` run the batch ``inputs`` with one pass per pair's common start.

    Yields whether it took effect (``False``: the batch layout or a backbone does not allow it; calls run plainly).
    Only calls with this batch's ``input_ids`` are shared; any other call goes to the plain forward.
    """
    lengths = shared_prompt_lengths(inputs)
    backbones = {id(b): b for b in (backbone_of(m) for m in models if m is not None) if b is not None}
    usable = lengths is not None and backbones and not any(map(_recomputes_activations, backbones.values()))
    if not usable:
        yield False
        return
    saved = []
    for backbone in backbones.values():
        saved.append((backbone, backbone.__dict__.get("forward")))
        backbone.forward = functools.partial(_shared_forward, backbone, backbone.forward, inputs["input_ids"], lengths)
    try:
        yield True
    finally:
        for backbone, own_forward in saved:
            if own_forward is None:
                del backbone.forward
            else:
                backbone.forward = own_forward


class SharedPromptLoss:
    """Mixin for a ``DPOTrainer`` subclass (listed before it): ``compute_loss`` runs with each pair's common start
    shared by the trained model and its reference when ``args.share_prompt`` is set."""

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        with shared_prompt_backbone([model, self.ref_model] if self.args.share_prompt else [], inputs):
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)


def _recomputes_activations(backbone: torch.nn.Module) -> bool:
    # transformers marks the checkpointed layers (and, in older releases, the stack); those layers drop the cache
    return backbone.training and any(getattr(m, "gradient_checkpointing", False) is True for m in backbone.modules())


def _shared_forward(backbone: torch.nn.Module, plain: Any, batch_ids: torch.Tensor, lengths: list[int],
                    input_ids: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                    *args: Any, **kwargs: Any) -> Any:
    unknown = [k for k, v in kwargs.items() if k not in _KNOWN_KWARGS and v is not None and v is not False]
    if (args or unknown or input_ids is None or attention_mask is None
            or input_ids.shape != batch_ids.shape or not torch.equal(input_ids, batch_ids)):
        return plain(*args, input_ids=input_ids, attention_mask=attention_mask, **kwargs)
    # Two calls whatever the batch size: every pair's common start, right-padded to the longest, then every row's
    # own tokens after its pair's start, continuing the start's cache (repeated for the pair's two rows) at the
    # positions where those tokens stand in the row.
    half, width, device = len(lengths), input_ids.shape[1], input_ids.device
    starts = torch.tensor(lengths, device=device)
    longest = int(starts.max())
    start_mask = (torch.arange(longest, device=device) < starts[:, None]).long()
    start = plain(input_ids=input_ids[:half, :longest], attention_mask=start_mask, use_cache=True)
    cache = returned_cache(backbone, start)
    cache.batch_repeat_interleave(2)  # rows pair 0 first, pair 0 second, pair 1 first, ...
    rows = torch.stack([torch.arange(half), torch.arange(half, 2 * half)], dim=1).flatten().to(device)
    row_starts = starts.repeat_interleave(2)
    row_ends = attention_mask.sum(dim=1)[rows]
    own = int((row_ends - row_starts).max())
    offsets = torch.arange(own, device=device)
    positions = row_starts[:, None] + offsets
    own_mask = (positions < row_ends[:, None]).long()
    own_ids = input_ids[rows[:, None], positions.clamp(max=width - 1)] * own_mask
    rest = plain(input_ids=own_ids, attention_mask=torch.cat([start_mask.repeat_interleave(2, dim=0), own_mask], 1),
                 position_ids=positions, use_cache=True, **with_cache(backbone, cache))
    hidden = start.last_hidden_state.new_zeros(2 * half, width, start.last_hidden_state.shape[-1])
    for index, row in enumerate(rows.tolist()):
        length, count = lengths[index // 2], int(row_ends[index] - row_starts[index])
        hidden[row, :length] = start.last_hidden_state[index // 2, :length]
        hidden[row, length:length + count] = rest.last_hidden_state[index, :count]
    return BaseModelOutputWithPast(last_hidden_state=hidden)
