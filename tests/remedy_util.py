"""A job folder like the field guide's (seed 000 errors 1-11, seed 003's stream bug), and its findings.

`make_job(tmp_path)` writes the broken folder; `seed_findings(job)` are the
findings the job-folder checks raise on it (same check IDs, remedy IDs,
evidence and data), so the remedy engine can be tested on its own.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from doctor.model import Evidence, Finding, Status

SBATCH = """\
#!/bin/bash
#SBATCH --job-name=dnabert-ddp
#SBATCH --nodes=1
#SBATCH --gres=gpu:4
#SBATCH --time=01:00:00

# Score-P settings for the diagnostic run
export SCOREP_ENABLE_TRACING=true
export SCOREP_TOTAL_MEMORY=4G
export SCOREP_CUDA_ENABLE=kernel,memcpy,sync
NGPUS=4
MODEL=zhihan1996/DNABERT-2-117M

python -m scorep --thread=pthread -- \\
    scorep_torchrun.py --nproc_per_node=$NGPUS train.py \\
    --model_name_or_path "$MODEL" \\
    --evaluation_strategy no \\
    --save_strategy steps \\
    --load_best_model_at_end True \\
    --max_steps 50
"""

TORCHRUN = """\
from torch.distributed.run import main

main()
"""

TRAIN = '''\
"""DNABERT-2 fine-tuning with DDP (HF Trainer), measured with Score-P."""

import os

import scorep.user  # module-level import
import torch
import transformers


class ScorePTrainer(transformers.Trainer):
    def training_step(self, model, inputs):
        scorep.user.region_begin("dnabert_train_step")
        result = super().training_step(model, inputs)
        scorep.user.region_end("dnabert_train_step")
        return result


def copy_metrics(metric_stack, cpu_buf, dev, metric_stream=None):
    stream = metric_stream or torch.cuda.current_stream(dev)
    with torch.cuda.stream(stream):
        stream.wait_stream(torch.cuda.current_stream(dev))
        cpu_buf.copy_(metric_stack, non_blocking=True)


def main():
    assert torch.cuda.is_available(), "no GPU"
    args = transformers.TrainingArguments(output_dir=os.environ.get("OUT", "out"))
    trainer = ScorePTrainer(model=None, args=args)
    trainer.train()
    trainer.save_model()


if __name__ == "__main__":
    main()
'''

LOG = """\
[Score-P] src/adapters/cuda/scorep_cupti_activity.c:187: Warning: [CUPTI Activity] Dropped 85222 \
records. Current buffer size: 1048576 bytes
To avoid dropping of records increase the buffer size!
Proposed minimum SCOREP_CUDA_BUFFER=8889000
"""


def make_job(root: Path, newline: str = "\n") -> Path:
    """Write the broken job folder under `root` and return it."""
    root.mkdir(parents=True, exist_ok=True)
    for name, text in (("job.sbatch", SBATCH), ("scorep_torchrun.py", TORCHRUN), ("train.py", TRAIN),
                       ("slurm-4242.out", LOG)):
        (root / name).write_bytes(text.replace("\n", newline).encode())
    (root / "job.sbatch").chmod(0o750)
    return root


def line_of(path: Path, needle: str) -> int:
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if needle in line:
            return i
    raise AssertionError(f"{needle!r} not in {path}")


def _finding(check: str, layer: str, remedy: str, path: Path, needle: str, **data: object) -> Finding:
    line = line_of(path, needle)
    text = path.read_text().splitlines()[line - 1].strip()
    return Finding(check, layer, Status.FAIL, f"{check} on {path.name}:{line}",
                   (Evidence(text, str(path), line),), (remedy,), {},
                   {"file": str(path), "line": line, "text": text, **data})


def seed_findings(job: Path) -> list[Finding]:
    """What the job-folder checks raise on `make_job`'s folder."""
    sb, tr = job / "job.sbatch", job / "train.py"
    return [
        _finding("SCP002", "scorep", "scorep-add-cuda", sb, "python -m scorep"),
        _finding("SCP003", "scorep", "scorep-total-memory", sb, "SCOREP_TOTAL_MEMORY",
                 var="SCOREP_TOTAL_MEMORY", value="4G", proposed="3500M"),
        _finding("SCP004", "scorep", "scorep-cuda-buffer", job / "slurm-4242.out", "Proposed minimum",
                 proposed_buffer=8889000),
        _finding("SCP005", "scorep", "scorep-drop-dashdash", sb, "python -m scorep"),
        _finding("LNC001", "launcher", "per-rank-launch", sb, "python -m scorep"),
        _finding("LNC002", "launcher", "cuda-warmup", sb, "python -m scorep"),
        _finding("SCR001", "script", "lazy-scorep-import", tr, "import scorep.user"),
        _finding("SCR002", "script", "destroy-process-group", tr, "trainer.train()"),
        _finding("SCR003", "script", "stream-capture-producer", tr, "stream.wait_stream"),
        _finding("SCR004", "script", "cuda-real-op-check", tr, "assert torch.cuda.is_available()"),
        _finding("TRN001", "trainer", "trainer-lbm-off", sb, "--load_best_model_at_end"),
        _finding("SCP001", "scorep", "manual-scorep-install", sb, "python -m scorep"),
    ]


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` (but .gpu-doctor/) -> its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and ".gpu-doctor" not in p.parts}


def digest(folder: Path) -> str:
    h = hashlib.sha256()
    for name, data in snapshot(folder).items():
        h.update(name.encode() + b"\0" + data)
    return h.hexdigest()
