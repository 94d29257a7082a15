"""Fine-tune a small sequence classifier with DDP, HF Trainer style.

One process per GPU, each started under its own `python -m scorep` by job.sbatch (the field
guide trains DNABERT-2 this way). On a CPU machine without transformers it runs with
mini_trainer.py and gloo:

    torchrun --nproc_per_node=2 train.py --use_cpu True --max_steps 5 --logging_steps 1
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

try:
    from transformers import HfArgumentParser, Trainer, TrainingArguments
except ImportError:  # a CPU smoke test without transformers
    from mini_trainer import HfArgumentParser, Trainer, TrainingArguments

from metrics import AsyncLossLogger

# scorep.user is imported on the first training step, after PyTorch has set up CUDA in
# this rank: None = not tried yet, False = not available.
_scorep_user = None


@dataclass
class ModelArguments:
    vocab_size: int = 4096
    hidden_size: int = 128
    num_labels: int = 2
    seq_len: int = 64
    train_samples: int = 2048


class SequenceClassifier(nn.Module):
    def __init__(self, margs: ModelArguments):
        super().__init__()
        self.embed = nn.Embedding(margs.vocab_size, margs.hidden_size)
        self.encoder = nn.Sequential(nn.Linear(margs.hidden_size, margs.hidden_size), nn.GELU(),
                                     nn.Linear(margs.hidden_size, margs.hidden_size))
        self.head = nn.Linear(margs.hidden_size, margs.num_labels)

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        logits = self.head(self.encoder(self.embed(input_ids)).mean(dim=1))
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = nn.functional.cross_entropy(logits, labels)
        return out


def synthetic_dataset(margs: ModelArguments, seed: int) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, margs.vocab_size, (margs.train_samples, margs.seq_len), generator=g)
    labels = (ids[:, 0] % margs.num_labels).long()
    return [{"input_ids": ids[i], "labels": labels[i]} for i in range(margs.train_samples)]


def collate(batch: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    return {k: torch.stack([row[k] for row in batch]) for k in batch[0]}


class ScorePTrainer(Trainer):
    """Marks each training step as a Score-P user region and logs the loss asynchronously."""

    loss_logger: AsyncLossLogger | None = None

    def training_step(self, model, inputs, *args, **kwargs):  # type: ignore[no-untyped-def]
        global _scorep_user
        if _scorep_user is None:
            try:
                import scorep.user

                _scorep_user = scorep.user
            except ImportError:
                _scorep_user = False
        if _scorep_user:
            _scorep_user.region_begin("train_step")
        loss = super().training_step(model, inputs, *args, **kwargs)
        if _scorep_user:
            _scorep_user.region_end("train_step")
        if self.loss_logger is None:
            self.loss_logger = AsyncLossLogger(loss.device)
        self.loss_logger.push(loss)
        return loss


def check_gpus(args: TrainingArguments) -> None:
    """A real CUDA op: is_available() can be False on a node whose runtime is still starting."""
    if args.use_cpu:
        return
    try:
        torch.zeros(1).cuda()
    except Exception as exc:
        raise SystemExit(f"rank {os.environ.get('RANK', '0')}: CUDA is not usable: {exc}") from exc


def main() -> None:
    parser = HfArgumentParser((ModelArguments, TrainingArguments))
    margs, targs = parser.parse_args_into_dataclasses()
    check_gpus(targs)
    trainer = ScorePTrainer(model=SequenceClassifier(margs), args=targs,
                            train_dataset=synthetic_dataset(margs, targs.seed), data_collator=collate)
    result = trainer.train()
    if int(os.environ.get("RANK", "0")) == 0:
        print(f"done: {result.global_step} steps, mean loss {result.training_loss:.4f}", flush=True)
    # Tear NCCL down now, before the interpreter (and Score-P) shut down: no watchdog race.
    if dist.is_available() and dist.is_initialized():
        dist.barrier()  # every rank done before any tears down
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
