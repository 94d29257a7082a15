"""Severity from evidence: LNC002, SCR001 and SCR002 at each level, and what set it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from examples_util import EXAMPLES
from jobfolder_util import run_check, worst, write_job

from doctor.model import Status

LAUNCH = "#!/bin/bash\n#SBATCH --gres=gpu:4\nexport SCOREP_CUDA_ENABLE=kernel,memcpy\n"
COLD_NODE = {"cuda_runtime": {"state": "ready", "ready_attempt": 3, "attempts": [], "last": {}}}
NO_DRIVER = {"nvml": {"driver_loaded": False, "no_driver": True, "gpus": []},
             "cuda_runtime": {"state": "error", "ready_attempt": None, "attempts": [], "last": {}}}


def log(signature: str, text: str) -> dict[str, Any]:
    return {"logscan": [{"signature": signature, "file": "slurm-88.out", "line": 40, "values": {"rank": 1},
                         "text": text}]}


LOG_802 = log("cuda_802", "RuntimeError: CUDA error: cudaErrorSystemNotReady: system not yet initialized")
LOG_FP16 = log("fp16_valueerror", "ValueError: FP16 Mixed precision training with AMP or APEX ('--fp16') can "
                                  "only be used on CUDA devices.")
LOG_WATCHDOG = log("nccl_watchdog_teardown", "c10d::ProcessGroupNCCL::ncclCommWatchdog() + 0x8b")

DDP_TRAIN = """
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

def main():
    dist.init_process_group("nccl")
    model = DDP(torch.nn.Linear(8, 8).cuda())
    model(torch.randn(2, 8, device="cuda")).sum().backward()

if __name__ == "__main__":
    main()
"""


def per_rank(tmp: Path, flags: str = "--cuda") -> Path:
    return write_job(tmp, {"job.sbatch": LAUNCH + "for r in 0 1 2 3; do\n"
                           f"  RANK=$r SCOREP_EXPERIMENT_DIRECTORY=scorep_rank_$r python -m scorep {flags} train.py &\n"
                           "done\nwait\n", "train.py": DDP_TRAIN})


# -- LNC002 ---------------------------------------------------------------------------------

@pytest.mark.parametrize("preset,status,said", [
    ({}, Status.WARN, "answered at the first attempt"),            # a warm node: a risk
    (NO_DRIVER, Status.WARN, "no NVIDIA driver on node07"),        # not measured here: a risk
    (COLD_NODE, Status.FAIL, "ready only after attempt 3"),        # GPU003 saw it cold
    (LOG_802, Status.FAIL, "the logs show it happened"),           # a rank hit 802
    (LOG_FP16, Status.FAIL, "the logs show it happened"),          # ... behind the FP16 ValueError
])
def test_lnc002_level_follows_the_node_and_the_logs(tmp_path: Path, preset: dict[str, Any], status: Status,
                                                     said: str) -> None:
    [out] = run_check("LNC002", per_rank(tmp_path), preset)
    assert out.status == status and said in out.message, out.message
    assert out.remedies == ("cuda-warmup",) and out.data["evidence_level"] == status.value
    if status == Status.FAIL and "logs" in said:
        assert ("slurm-88.out", 40) in [(e.file, e.line) for e in out.evidence]


@pytest.mark.parametrize("flags", ["--thread=pthread", "--hip --thread=pthread", "--nocuda"])
def test_lnc002_skips_without_a_cuda_adapter_even_on_a_cold_node(tmp_path: Path, flags: str) -> None:
    root = write_job(tmp_path, {"job.sbatch": "#!/bin/bash\nexport SCOREP_EXPERIMENT_DIRECTORY=scorep_rocm\n"
                                f"srun python -m scorep {flags} train.py\n", "train.py": DDP_TRAIN})
    [out] = run_check("LNC002", root, {**COLD_NODE, **LOG_802})
    assert out.status == Status.SKIP and "no CUDA adapter" in out.message


def test_lnc002_only_wanted_adapter_is_a_warning_even_with_802_in_the_logs(tmp_path: Path) -> None:
    root = per_rank(tmp_path, "--thread=pthread")  # SCOREP_CUDA_ENABLE set, --cuda missing: SCP002's finding
    [out] = run_check("LNC002", root, LOG_802)
    assert out.status == Status.WARN and "SCP002" in out.message


# -- SCR001 ---------------------------------------------------------------------------------

SPAWNED = LAUNCH + "python -m scorep --cuda $(which torchrun) --nproc_per_node 4 train.py\n"


@pytest.mark.parametrize("preset,status", [({}, Status.WARN), (NO_DRIVER, Status.WARN),
                                           (COLD_NODE, Status.FAIL), (LOG_802, Status.FAIL),
                                           (LOG_FP16, Status.FAIL)])
def test_scr001_level_follows_the_node_and_the_logs(tmp_path: Path, preset: dict[str, Any],
                                                    status: Status) -> None:
    root = write_job(tmp_path, {"job.sbatch": SPAWNED, "train.py": "import scorep.user\n" + DDP_TRAIN})
    [out] = run_check("SCR001", root, preset)
    assert out.status == status and out.data["evidence_level"] == status.value, out.message
    assert ("train.py", 1) in [(e.file, e.line) for e in out.evidence]


def test_scr001_passes_without_a_cuda_adapter(tmp_path: Path) -> None:
    launch = "#!/bin/bash\npython -m scorep --thread=pthread $(which torchrun) --nproc_per_node 4 train.py\n"
    root = write_job(tmp_path, {"job.sbatch": launch, "train.py": "import scorep.user\n" + DDP_TRAIN})
    [out] = run_check("SCR001", root, {**COLD_NODE, **LOG_802})
    assert out.status == Status.PASS and "no CUDA adapter" in out.message


LOOP_AFTER_CUDA = """
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("nccl")
rank = dist.get_rank()
torch.cuda.set_device(rank)
model = DDP(torch.nn.Linear(8, 8).cuda(), device_ids=[rank])
su = None
for step in range(50):
    if su is None:
        import scorep.user as su
    su.region_begin("step")
    model(torch.randn(4, 8, device="cuda")).sum().backward()
    su.region_end("step")
dist.destroy_process_group()
"""

FIRST_STEP = """
import transformers

_scorep_user = None  # None = not yet tried; False = import failed


class ScorePTrainer(transformers.Trainer):
    def training_step(self, model, inputs, num_items_in_batch=None):
        global _scorep_user
        if _scorep_user is None:
            try:
                import scorep.user
                _scorep_user = scorep.user
            except ImportError:
                _scorep_user = False
        if _scorep_user:
            _scorep_user.region_begin("train_step")
        return super().training_step(model, inputs, num_items_in_batch)


def main():
    ScorePTrainer(model=None, args=transformers.TrainingArguments(output_dir="out")).train()


if __name__ == "__main__":
    main()
"""


@pytest.mark.parametrize("train", [LOOP_AFTER_CUDA, FIRST_STEP], ids=["in-the-loop-after-cuda", "first-step"])
def test_scr001_passes_the_lazy_import_after_cuda_init(tmp_path: Path, train: str) -> None:
    root = write_job(tmp_path, {"job.sbatch": SPAWNED, "train.py": train})
    out = run_check("SCR001", root, {**COLD_NODE, **LOG_802})
    assert worst(out) == Status.PASS, [o.message for o in out]


def test_scr001_module_level_import_before_cuda_still_counts(tmp_path: Path) -> None:
    train = LOOP_AFTER_CUDA.replace("su = None\n", "import scorep.user as su\n", 1)
    root = write_job(tmp_path, {"job.sbatch": SPAWNED, "train.py": "import scorep.user\n" + train})
    assert worst(run_check("SCR001", root, LOG_802)) == Status.FAIL


# -- SCR002 ---------------------------------------------------------------------------------

ACCELERATE = """
import torch
from accelerate import Accelerator


def main():
    accelerator = Accelerator(mixed_precision="bf16")
    model = torch.nn.Linear(16, 16)
    opt = torch.optim.AdamW(model.parameters())
    model, opt = accelerator.prepare(model, opt)
    for _ in range(10):
        loss = model(torch.randn(8, 16, device=accelerator.device)).pow(2).mean()
        accelerator.backward(loss)
        opt.step()
    accelerator.end_training()


if __name__ == "__main__":
    main()
"""
ACCEL_LAUNCH = LAUNCH + "accelerate launch --multi_gpu --num_processes 4 train.py\n"


@pytest.mark.parametrize("pin,status,said", [
    ("accelerate==1.2.1\n", Status.PASS, "since 0.34"),
    ("accelerate>=0.34.2\ntransformers\n", Status.PASS, "since 0.34"),
    ("accelerate==0.30.1\n", Status.WARN, "only since 0.34"),  # no Score-P CUDA adapter here: a risk
    ("", Status.WARN, "version is not known"),
])
def test_scr002_knows_accelerate_end_training(tmp_path: Path, pin: str, status: Status, said: str) -> None:
    files = {"job.sbatch": ACCEL_LAUNCH, "train.py": ACCELERATE}
    if pin:
        files["requirements.txt"] = "torch==2.4.1\n" + pin
    [out] = run_check("SCR002", write_job(tmp_path, files))
    assert out.status == status and said in out.message, out.message
    assert ("train.py", 14) in [(e.file, e.line) for e in out.evidence]


def test_scr002_old_accelerate_under_scorep_cuda_fails(tmp_path: Path) -> None:
    launch = LAUNCH + "python -m scorep --cuda $(which accelerate) launch --num_processes 4 train.py\n"
    root = write_job(tmp_path, {"job.sbatch": launch, "train.py": ACCELERATE,
                                "requirements.txt": "accelerate==0.30.1\n"})
    [out] = run_check("SCR002", root)
    assert out.status == Status.FAIL and "only since 0.34" in out.message


def test_scr002_watchdog_in_the_logs_fails_even_without_scorep(tmp_path: Path) -> None:
    train = DDP_TRAIN
    root = write_job(tmp_path, {"job.sbatch": "#!/bin/bash\ntorchrun --nproc_per_node 4 train.py\n",
                                "train.py": train})
    assert run_check("SCR002", root)[0].status == Status.WARN
    [out] = run_check("SCR002", root, LOG_WATCHDOG)
    assert out.status == Status.FAIL and ("slurm-88.out", 40) in [(e.file, e.line) for e in out.evidence]


def test_every_checks_catalogue_entry_states_its_severity_rule() -> None:
    from doctor import registry
    from doctor.catalogue_cli import explain_text

    for chk in registry.all_checks():
        text = explain_text(chk.id)
        assert "\nSeverity:\n" in text, chk.id
        rule = text.split("\nSeverity:\n", 1)[1].split("\n\n", 1)[0]
        assert any(word in rule for word in ("fail", "warn")), (chk.id, rule)


# -- realistic clean jobs: the gate lets them run ---------------------------------------------

CLEAN = Path(__file__).resolve().parent / "fixtures" / "clean"
# (folder, statuses the run must show: guards against a folder that is not really analysed)
CLEAN_JOBS = [
    (CLEAN / "hf-trainer", {"SCR002": "warn", "TRN001": "pass"}),  # the HF Trainer never destroys the group
    (CLEAN / "ddp-torchrun", {"SCR002": "pass", "SCR001": "pass"}),
    (CLEAN / "perrank-warmup", {"LNC002": "pass", "SCR001": "pass", "SCP006": "pass", "SCR002": "pass"}),
    (CLEAN / "perrank-nowarmup", {"LNC002": "warn", "SCP006": "pass"}),  # a risk, not a blocker
    (CLEAN / "rocm-scorep", {"LNC002": "skip", "SCR001": "pass", "SCR002": "pass", "SCP006": "pass"}),
    (EXAMPLES / "scorep-ddp-fixed", {"LNC002": "pass", "SCR002": "pass"}),
]


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> str:
    from diagnosis_util import bare_python

    return bare_python(tmp_path_factory.mktemp("bare"))


@pytest.mark.parametrize("folder,expect", CLEAN_JOBS, ids=[c[0].name for c in CLEAN_JOBS])
def test_the_gate_lets_realistic_clean_jobs_run(folder: Path, expect: dict[str, str], tmp_path: Path,
                                                bare: str) -> None:
    from diagnosis_util import gate

    run = gate(folder, tmp_path, "--json", "--python", bare)
    assert run.rc == 0, run.stdout + run.stderr
    assert {cid: run.status(cid) for cid in expect} == expect
    assert run.doc is not None
    if "warn" in expect.values():  # an OK verdict with a warning still names the next step
        assert str(run.doc["diagnosis"]["next"]).startswith("gpu-doctor ")


def test_on_a_node_that_was_cold_the_gate_fails_an_unwarmed_scorep_launch(fake_node: Any, tmp_path: Path) -> None:
    """The real runtime probe against the C fakes: the runtime answers 802 twice, then is ready."""
    from diagnosis_util import gate_env, next_command, paste
    from gate_util import run_gate

    env = {**fake_node("transient_802", FAKE_CUDART_FAIL_FIRST=2), "PYTHONPATH": gate_env()["PYTHONPATH"]}
    run = run_gate(env, "--quiet", "--json", str(CLEAN / "perrank-nowarmup"), tmp_path=tmp_path)
    assert run.rc == 1 and run.status("GPU003") == "warn"
    lnc002 = run.check("LNC002")
    assert lnc002["status"] == "fail" and "ready only after attempt 3" in lnc002["message"]
    text = run_gate(env, "--quiet", str(CLEAN / "perrank-nowarmup"), tmp_path=tmp_path).stdout
    command = next_command(text)
    assert command == f"gpu-doctor fix {CLEAN / 'perrank-nowarmup'} --only cuda-warmup --diff"
    pasted = paste(command, tmp_path, gate_env())
    assert pasted.returncode == 0 and "+    torch.zeros(1).cuda()" in pasted.stdout
