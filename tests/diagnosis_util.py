"""Job folders for the severity and diagnosis tests, a fake Score-P install, and the gate in a subprocess."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import tracegen as tg
from gate_util import GateRun, run_gate
from jobfolder_util import REPO, write_job

WARMUP = '''
for attempt in $(seq 1 30); do
    if python -c "
import sys
import torch
try:
    torch.zeros(1).cuda()
except Exception:
    sys.exit(1)
" 2>/dev/null; then
        echo "CUDA runtime ready after $attempt attempt(s)."
        break
    fi
    sleep 10
done
'''

# The field guide's whole chain: torchrun under `python -m scorep --cuda` (warm-up done), a
# module-level `import scorep.user` in the workers, no destroy_process_group(); the log holds
# the FP16 ValueError of rank 1 and the watchdog abort of rank 2; rank 2 left no folder.
SEED_CHAIN = {
    "job.sbatch": """
        #!/bin/bash
        #SBATCH --job-name=dnabert2-ddp
        #SBATCH --nodes=1
        #SBATCH --gres=gpu:4
        #SBATCH --output=slurm-%j.out
        set -euo pipefail
        cd "${SLURM_SUBMIT_DIR:-$(dirname "$0")}"
        module load Score-P/8.4-CUDA-12.4

        export SCOREP_ENABLE_TRACING=true
        export SCOREP_TOTAL_MEMORY=3500M
        export SCOREP_CUDA_ENABLE=kernel,memcpy,sync
        export SCOREP_CUDA_BUFFER=64M
        NGPUS=${SLURM_GPUS_ON_NODE:-4}
        """ + WARMUP + """
        python -m scorep --cuda --thread=pthread scorep_torchrun.py \\
            --standalone --nproc_per_node="$NGPUS" \\
            train.py --max_steps 50 --per_device_train_batch_size 32 --fp16
        """,
    "scorep_torchrun.py": """
        from torch.distributed.run import main

        if __name__ == "__main__":
            main()
        """,
    "train.py": """
        import os

        import scorep.user
        import torch
        from transformers import HfArgumentParser, Trainer, TrainingArguments


        class RegionTrainer(Trainer):
            def training_step(self, model, inputs, num_items_in_batch=None):
                scorep.user.region_begin("train_step")
                out = super().training_step(model, inputs, num_items_in_batch)
                scorep.user.region_end("train_step")
                return out


        def main():
            (args,) = HfArgumentParser(TrainingArguments).parse_args_into_dataclasses()
            model = torch.nn.Linear(128, 2)
            trainer = RegionTrainer(model=model, args=args)
            trainer.train()


        if __name__ == "__main__":
            main()
        """,
    "slurm-4711.out": """
        W1201 09:12:03.123000 torch/distributed/run.py:792] Setting OMP_NUM_THREADS environment variable
        [rank1]: Traceback (most recent call last):
        [rank1]:   File "train.py", line 17, in main
        [rank1]: ValueError: FP16 Mixed precision training with AMP or APEX ('--fp16') can only be used on CUDA devices.
        {'loss': 0.6931, 'grad_norm': 1.02, 'learning_rate': 4.9e-05, 'epoch': 0.02}
        [rank2]: terminate called after throwing an instance of 'c10::Error'
        [rank2]:   what():  Should never been called (dummyHasPrimaryContext)
        [rank2]: Exception raised from dummyHasPrimaryContext at ../aten/src/ATen/detail/CUDAHooksInterface.h:48
        [rank2]: frame #4: c10d::ProcessGroupNCCL::ncclCommWatchdog() + 0x8b
        """,
}


def seed_chain(root: Path) -> Path:
    write_job(root, SEED_CHAIN)
    for rank in (0, 1, 3):
        tg.rank_with_cuda(root, rank)
    return root


def gate_env() -> dict[str, str]:
    """This checkout importable; nothing of this shell's Score-P or Slurm settings leaks in. No
    Score-P is installed here: the job folders `module load` it, so SCP001 says `unknown`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SCOREP_", "SLURM_", "CUDA_VISIBLE"))}
    env["PYTHONPATH"] = str(REPO)
    env.pop("GPU_DOCTOR_DEBUG", None)
    return env


def gate(root: Path, tmp: Path, *args: str) -> GateRun:
    return run_gate(gate_env(), "--quiet", *args, str(root), tmp_path=tmp)


def bare_python(folder: Path) -> str:
    """An interpreter without torch (a fresh venv): the framework probe then answers at once
    instead of importing torch for GPU004, which a host without a driver skips anyway."""
    venv = folder / "bare-venv"
    if not venv.exists():
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    return str(venv / "bin" / "python")


def next_command(reason: str) -> str:
    """The command at the end of a reason line ('...; next: gpu-doctor fix PATH --diff')."""
    head, sep, command = reason.rpartition("; next: ")
    assert sep, f"no next command in {reason!r}"
    return command.strip()


def paste(command: str, tmp: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run `command` as a user pasting it would: through a shell, with `gpu-doctor` on PATH."""
    shim = tmp / "shim"
    shim.mkdir(exist_ok=True)
    tool = shim / "gpu-doctor"
    tool.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -m doctor \"$@\"\n")
    tool.chmod(0o755)
    env = {**env, "PATH": f"{shim}{os.pathsep}{env['PATH']}"}
    return subprocess.run(["bash", "-c", command], env=env, capture_output=True, text=True, timeout=120,
                          cwd=tmp)
