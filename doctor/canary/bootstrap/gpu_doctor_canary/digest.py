"""Digests of tensors, computed on the device the tensors live on (no host copy of the model).

A tensor's bytes are read as 64-bit words (its elements, widened, when its size is not a
multiple of 8 bytes) and folded into one int64 with wrap-around arithmetic:

    d = sum(w) + C * sum(w * w)          (mod 2**64)

One flipped bit changes sum(w) by +-2**k, never 0 mod 2**64; the square term catches
changes that cancel in the plain sum. The 8-byte digest of a model is
sum((2i + 1) * d_i) over its tensors in name order: odd weights are invertible mod 2**64,
so one changed tensor always changes it. Only the 8-byte digest leaves the device every
check; the per-tensor digests (8 bytes per tensor) only when the ranks disagree.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

MIX = -7046029254386353131   # 0x9E3779B97F4A7C15 as a signed 64-bit value (the golden-ratio constant)


def words(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes as int64 values, on its own device. The words depend on the bytes
    alone, never on where the tensor starts in its storage: 8-byte words when the size allows
    (copied on the device first when the offset does not allow the view), else each element
    widened."""
    flat = t.detach().reshape(-1)
    if flat.numel() * flat.element_size() % 8 == 0:
        try:
            return flat.view(torch.int64)
        except RuntimeError:    # the storage offset does not allow this view
            return flat.clone().view(torch.int64)
    same_size = {1: torch.uint8, 2: torch.int16, 4: torch.int32}[flat.element_size()]
    return flat.view(same_size).to(torch.int64)


def tensor_digest(t: torch.Tensor) -> torch.Tensor:
    """A 0-dim int64 tensor on t's device."""
    w = words(t)
    if w.numel() == 0:
        return torch.zeros((), dtype=torch.int64, device=t.device)
    return w.sum() + (w * w).sum() * MIX


def digests(tensors: Sequence[torch.Tensor]) -> tuple[Any, Any]:
    """(the 8-byte model digest as a 0-dim int64 tensor, the per-tensor digests as an
    int64 vector), both on the tensors' device (the first tensor's when they are on several:
    only the 8-byte results move there)."""
    if not tensors:
        zero = torch.zeros((), dtype=torch.int64)
        return zero, torch.zeros(0, dtype=torch.int64)
    device = tensors[0].device
    per = torch.stack([tensor_digest(t).to(device) for t in tensors])
    weights = torch.arange(1, 2 * len(tensors), 2, dtype=torch.int64, device=device)
    return (per * weights).sum(), per
