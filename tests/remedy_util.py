"""A job folder like the field guide's (seed 000 errors 1-11, seed 003's stream bug), and its findings.

`make_job(tmp_path)` writes the broken folder; `seed_findings(job)` are the
findings the real job-folder checks raise on it (on a node whose Score-P is not
on the job's PATH), so the remedy engine is tested on what the checks emit.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from doctor.model import Finding

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


def seed_findings(job: Path) -> list[Finding]:
    """What the job-folder checks raise on `make_job`'s folder: SCP001-TRN001, each with its remedy."""
    from jobfolder_util import HEALTHY, JOB_CHECKS, case_for

    from doctor.runner import run_checks

    node = {name: value for name, value in HEALTHY.items() if name != "logscan"}  # the log is read
    node["scorep_install"] = {"python": "/usr/bin/python3", "notes": ["scorep-config: not found on PATH"]}
    run = run_checks(case_for(job), list(JOB_CHECKS), budget_s=60, preset_facts=node)
    return run.findings


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` (but .gpu-doctor/) -> its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and ".gpu-doctor" not in p.parts}


def digest(folder: Path) -> str:
    h = hashlib.sha256()
    for name, data in snapshot(folder).items():
        h.update(name.encode() + b"\0" + data)
    return h.hexdigest()


DROPPED_LOG = ("[Score-P] src/adapters/cuda/scorep_cupti_activity.c:187: Warning: [CUPTI Activity] Dropped "
               "85222 records. Current buffer size: 1048576 bytes\nTo avoid dropping of records increase the "
               "buffer size!\nProposed minimum SCOREP_CUDA_BUFFER=8889000\n")
NEVER_READY = {"state": "never_ready", "ready_attempt": None, "waited_s": 45.0, "budget_s": 45.0,
               "attempts": [{"api": "runtime", "code": 802, "attempt": 1, "duration_s": 0.02, "timed_out": False}],
               "last": {"api": "runtime", "code": 802, "attempt": 1, "duration_s": 0.02, "timed_out": False}}


def raised(root: Path, *check_ids: str, host: str = "node07", **facts: object) -> list[Finding]:
    """The open findings the real checks raise on the job folder `root`, on a healthy node unless
    `facts` say otherwise (the job's logs are read)."""
    from jobfolder_util import HEALTHY, case_for

    from doctor.model import Status
    from doctor.runner import run_checks

    node = {name: value for name, value in HEALTHY.items() if name != "logscan"}
    run = run_checks(case_for(root, host=host), list(check_ids), budget_s=60, preset_facts={**node, **facts})
    found = [f for f in run.findings if f.check_id in check_ids and f.status not in (Status.PASS, Status.SKIP)]
    assert found, f"none of {check_ids} raised anything on {root}"
    return found
