"""A stand-in for the few transformers APIs train.py uses, so the job runs without transformers.

`TrainingArguments` validates like transformers does (the load_best_model_at_end strategy
check, fp16/bf16 only on CUDA), `HfArgumentParser` reads dataclass fields from the command
line or a JSON file, and `Trainer.train()` runs a plain DDP loop: gloo on CPU, NCCL on GPUs.
Like the real Trainer it creates the process group itself when started as several ranks
(torchrun, or RANK/WORLD_SIZE set), and, like the real one, it never destroys it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

_TRUE = {"yes", "true", "t", "y", "1"}
_FALSE = {"no", "false", "f", "n", "0"}


def string_to_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if str(value).lower() in _TRUE:
        return True
    if str(value).lower() in _FALSE:
        return False
    raise argparse.ArgumentTypeError(f"Truthy value expected: got {value}")


@dataclass
class TrainingArguments:
    output_dir: str = "out"
    max_steps: int = 10
    per_device_train_batch_size: int = 8
    learning_rate: float = 5e-4
    eval_strategy: str = "no"
    evaluation_strategy: str | None = None  # the spelling older transformers versions use
    save_strategy: str = "steps"
    save_steps: int = 500
    eval_steps: int | None = None
    logging_steps: int = 10
    load_best_model_at_end: bool = False
    fp16: bool = False
    bf16: bool = False
    use_cpu: bool = False
    seed: int = 42

    def __post_init__(self) -> None:
        if self.evaluation_strategy is not None:
            self.eval_strategy = self.evaluation_strategy
        self.eval_strategy = str(self.eval_strategy).lower()
        self.save_strategy = str(self.save_strategy).lower()
        if self.load_best_model_at_end and self.save_strategy != "best" \
                and self.eval_strategy != self.save_strategy:
            raise ValueError(
                "--load_best_model_at_end requires the save and eval strategy to match, but found\n"
                f"- Evaluation strategy: {self.eval_strategy.upper()}\n"
                f"- Save strategy: {self.save_strategy.upper()}")
        if (self.fp16 or self.bf16) and self.device.type != "cuda":
            raise ValueError("FP16 Mixed precision training with AMP or APEX (`--fp16`) and FP16 half "
                             "precision evaluation (`--fp16_full_eval`) can only be used on CUDA devices.")

    @property
    def device(self) -> torch.device:
        if self.use_cpu or not torch.cuda.is_available():
            return torch.device("cpu")
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))


class HfArgumentParser(argparse.ArgumentParser):
    """Command-line flags (or a JSON file) -> one instance per dataclass."""

    def __init__(self, dataclass_types: Any):
        super().__init__()
        self.dataclass_types = list(dataclass_types) if isinstance(dataclass_types, (list, tuple)) \
            else [dataclass_types]
        for dtype in self.dataclass_types:
            for f in dataclasses.fields(dtype):
                kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", "str")
                if kind.startswith("bool"):
                    self.add_argument(f"--{f.name}", type=string_to_bool, nargs="?", const=True, default=f.default)
                else:
                    conv = int if kind.startswith("int") else float if kind.startswith("float") else str
                    self.add_argument(f"--{f.name}", type=conv, default=f.default)

    def parse_args_into_dataclasses(self, args: list[str] | None = None) -> tuple[Any, ...]:
        ns = self.parse_args(args)
        return tuple(d(**{f.name: getattr(ns, f.name) for f in dataclasses.fields(d)})
                     for d in self.dataclass_types)

    def parse_json_file(self, json_file: str) -> tuple[Any, ...]:
        with open(json_file, encoding="utf-8") as fh:
            data = json.load(fh)
        return tuple(d(**{k: v for k, v in data.items() if k in {f.name for f in dataclasses.fields(d)}})
                     for d in self.dataclass_types)


class TrainOutput(NamedTuple):
    global_step: int
    training_loss: float


class Trainer:
    def __init__(self, model: torch.nn.Module, args: TrainingArguments, train_dataset: list[dict[str, Any]],
                 data_collator: Any = None):
        self.model = model
        self.args = args
        self.train_dataset = train_dataset
        self.data_collator = data_collator
        self.log_history: list[dict[str, float]] = []

    def _setup_distributed(self) -> tuple[int, int]:
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world > 1 and not dist.is_initialized():
            dist.init_process_group("nccl" if self.args.device.type == "cuda" else "gloo")
        if dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
        return 0, 1

    def training_step(self, model: torch.nn.Module, inputs: dict[str, torch.Tensor],
                      num_items_in_batch: Any = None) -> torch.Tensor:
        model.train()
        with torch.autocast(self.args.device.type, dtype=torch.float16, enabled=self.args.fp16):
            loss = model(**inputs)["loss"]
        loss.backward()
        return loss.detach()

    def train(self) -> TrainOutput:
        rank, world = self._setup_distributed()
        device = self.args.device
        torch.manual_seed(self.args.seed)
        model = self.model.to(device)
        if world > 1:
            model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
        optimizer = torch.optim.AdamW(model.parameters(), lr=self.args.learning_rate)
        shard = self.train_dataset[rank::world]
        bs = self.args.per_device_train_batch_size
        total = 0.0
        for step in range(self.args.max_steps):
            start = (step * bs) % max(1, len(shard) - bs + 1)
            batch = self.data_collator(shard[start:start + bs])
            batch = {k: v.to(device) for k, v in batch.items()}
            optimizer.zero_grad(set_to_none=True)
            loss = self.training_step(model, batch)
            optimizer.step()
            total += float(loss)
            if rank == 0 and (step + 1) % self.args.logging_steps == 0:
                self.log_history.append({"step": step + 1, "loss": float(loss)})
                print(json.dumps({"step": step + 1, "loss": round(float(loss), 4)}), flush=True)
        return TrainOutput(self.args.max_steps, total / max(1, self.args.max_steps))
