"""Training progress read from what ranks print.

Recognised (the lines trainers commonly print):
- Hugging Face Trainer logs: `{'loss': 0.6931, 'learning_rate': 5e-05, 'epoch': 0.12}`
- tqdm bars: ` 12%|#2        | 6/50 [00:03<00:22,  1.95it/s]`
- step counters: `step 12`, `Step 12/50`, `global_step=12`, `iter 7 of 100`, `[12/50]`
- epochs: `Epoch 3/10`, `epoch: 2`
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_HF_LOSS = re.compile(r"""['"](?:train_)?loss['"]\s*:\s*(""" + _NUM + ")")
_HF_EPOCH = re.compile(r"""['"]epoch['"]\s*:\s*(""" + _NUM + ")")
_HF_STEP = re.compile(r"""['"](?:global_)?step['"]\s*:\s*(\d+)""")
_TQDM = re.compile(r"\|\s*(\d+)/(\d+)\s*(?:\[|$)|(?<![\d/])(\d+)/(\d+)\s*\[\d")
_STEP = re.compile(r"\b(?:global[_ ]step|step|iter(?:ation)?)s?\b\s*[:=#]?\s*(\d+)(?:\s*(?:/|of)\s*(\d+))?",
                   re.IGNORECASE)
_BRACKET = re.compile(r"\[\s*(\d+)\s*/\s*(\d+)\s*\]")
_EPOCH = re.compile(r"\bepoch\b\s*[:=]?\s*(" + _NUM + r")(?:\s*/\s*(\d+))?", re.IGNORECASE)
_LOSS = re.compile(r"\bloss\b\s*[:=]?\s*(" + _NUM + ")", re.IGNORECASE)


@dataclass(frozen=True)
class Progress:
    step: int | None = None
    total: int | None = None
    epoch: float | None = None
    loss: float | None = None


def _float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _hf_dict(line: str) -> Progress | None:
    stripped = line.strip()
    if not (stripped.startswith("{") and ("loss" in stripped or "epoch" in stripped)):
        return None
    loss = _HF_LOSS.search(stripped)
    epoch = _HF_EPOCH.search(stripped)
    step = _HF_STEP.search(stripped)
    if not (loss or epoch or step):
        return None
    return Progress(step=int(step.group(1)) if step else None,
                    epoch=_float(epoch.group(1)) if epoch else None,
                    loss=_float(loss.group(1)) if loss else None)


def _step(line: str) -> tuple[int | None, int | None]:
    m = _TQDM.search(line)
    if m:
        done, total = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
        return int(done), int(total)
    m = _STEP.search(line)
    if m:
        return int(m.group(1)), int(m.group(2)) if m.group(2) else None
    m = _BRACKET.search(line)
    if m:
        return int(m.group(1)), int(m.group(2))
    return None, None


def parse_progress(line: str) -> Progress | None:
    """The progress a line reports, or None when it reports none."""
    if len(line) > 4096:  # progress lines are short; don't regex megabytes
        line = line[:4096]
    hf = _hf_dict(line)
    if hf is not None:
        return hf
    step, total = _step(line)
    epoch_m = _EPOCH.search(line)
    epoch = _float(epoch_m.group(1)) if epoch_m else None
    if step is None and epoch is None:
        return None
    loss_m = _LOSS.search(line)
    return Progress(step=step, total=total, epoch=epoch, loss=_float(loss_m.group(1)) if loss_m else None)


def merge_progress(old: Progress | None, new: Progress | None) -> Progress | None:
    """`new` over `old`, field by field (a loss line does not erase the step)."""
    if old is None or new is None:
        return new or old
    stepped = new.step is not None
    return Progress(step=new.step if stepped else old.step, total=new.total if stepped else old.total,
                    epoch=new.epoch if new.epoch is not None else old.epoch,
                    loss=new.loss if new.loss is not None else old.loss)
