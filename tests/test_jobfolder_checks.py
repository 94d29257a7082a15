"""Positive and negative cases for every job-folder check, over real files in tmp_path."""

from __future__ import annotations

from pathlib import Path

import pytest
from jobfolder_util import bad, run_check, where, worst, write_job

from doctor.facts import ProbeFailure
from doctor.model import Status

TRAIN = "import torch\n"
DDP_TRAIN = """
import torch
import torch.distributed as dist

def main():
    dist.init_process_group("nccl")
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 2).cuda())
    dist.destroy_process_group()

if __name__ == "__main__":
    main()
"""


def job(tmp_path: Path, launch: str, train: str = TRAIN, **more: str) -> Path:
    return write_job(tmp_path, {"job.sbatch": "#!/bin/bash\n#SBATCH --gres=gpu:4\n" + launch, "train.py": train,
                                **more})


# -- SCP001 -----------------------------------------------------------------

def test_scp001_passes_with_a_cuda_scorep_and_bindings(tmp_path: Path) -> None:
    out = run_check("SCP001", job(tmp_path, "python -m scorep --cuda train.py\n"))
    assert worst(out) == Status.PASS and "Score-P 8.1" in out[0].message


@pytest.mark.parametrize("install,status,words", [
    ({"scorep_config": None, "notes": ["scorep-config is not on the job's PATH"]}, Status.FAIL, "not installed"),
    ({"cuda_support": False}, Status.FAIL, "without CUDA support"),
    ({"python_bindings": False}, Status.FAIL, "cannot import"),
    ({"python_bindings": None}, Status.UNKNOWN, "could not tell"),
])
def test_scp001_install_problems(tmp_path: Path, install: dict, status: Status, words: str) -> None:
    from jobfolder_util import HEALTHY

    preset = {"scorep_install": {**HEALTHY["scorep_install"], **install}}
    out = run_check("SCP001", job(tmp_path, "python -m scorep --cuda train.py\n"), preset)
    assert worst(out) == status and words in out[0].message
    assert out[0].remedies == ("manual-scorep-install",)


def test_scp001_module_load_makes_a_missing_scorep_unknown_with_the_line(tmp_path: Path) -> None:
    from jobfolder_util import HEALTHY

    preset = {"scorep_install": {**HEALTHY["scorep_install"], "scorep_config": None}}
    out = run_check("SCP001", job(tmp_path, "module load scorep/8.1\npython -m scorep --cuda train.py\n"), preset)
    assert worst(out) == Status.UNKNOWN and ("job.sbatch", 3) in where(out)


def test_scp001_skips_a_job_without_scorep(tmp_path: Path) -> None:
    assert worst(run_check("SCP001", job(tmp_path, "torchrun --nproc_per_node 4 train.py\n"))) == Status.SKIP


def test_scorep_install_probe_finds_a_fake_scorep_on_the_job_path(tmp_path: Path) -> None:
    import os
    import sys
    import time

    from doctor.case import Case
    from doctor.facts import Facts
    from doctor.jobfolder.facts import scorep_install

    bin_dir = tmp_path / "scorep" / "bin"
    bin_dir.mkdir(parents=True)
    for name, body in (("scorep-config", 'echo "Score-P 8.1"'),
                       ("scorep-info", 'printf "Score-P (backend):\\n    CUDA support:     yes\\n"')):
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    pkg = tmp_path / "site" / "scorep"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "_bindings.cpython-311-x86_64-linux-gnu.so").write_bytes(b"")
    write_job(tmp_path / "job", {"run.sh": f"export PATH={bin_dir}:$PATH\nexport PYTHONPATH={tmp_path / 'site'}\n"
                                           "python -m scorep --cuda train.py\n", "train.py": "pass\n"})
    case = Case(root=tmp_path / "job", env={"PATH": os.environ["PATH"]}, python=sys.executable)
    facts = Facts(case, time.monotonic() + 30)
    from doctor.facts import ProbeContext

    value = scorep_install(ProbeContext(case, facts, time.monotonic() + 30, 15.0))
    assert value["scorep_config"] == str(bin_dir / "scorep-config")
    assert value["version"] == "Score-P 8.1" and value["cuda_support"] is True
    assert value["python_bindings"] is True, value["notes"]


def test_scorep_install_as_root_in_the_gate_runs_nothing_user_writable(tmp_path: Path) -> None:
    import os
    import time

    from doctor.case import Case
    from doctor.facts import Facts, ProbeContext
    from doctor.jobfolder.facts import scorep_install

    if os.geteuid() != 0:
        pytest.skip("the rule is for the gate running as root")
    marker = tmp_path / "ran"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scorep-config").write_text(f"#!/bin/sh\ntouch {marker}\necho 'Score-P 8.1'\n")
    (bin_dir / "scorep-config").chmod(0o755)
    write_job(tmp_path / "job", {"run.sh": "python -m scorep --cuda train.py\n", "train.py": "pass\n"})
    case = Case(root=tmp_path / "job", env={"PATH": f"{bin_dir}:/usr/bin:/bin"}, gate=True)
    value = scorep_install(ProbeContext(case, Facts(case, time.monotonic() + 30), time.monotonic() + 30, 15.0))
    assert value["scorep_config"] == str(bin_dir / "scorep-config") and value["version"] is None
    assert any("not run as root" in n for n in value["notes"]) and not marker.exists()


# -- SCP002 -----------------------------------------------------------------

@pytest.mark.parametrize("launch", [
    "export SCOREP_CUDA_ENABLE=kernel,memcpy,sync\npython -m scorep --thread=pthread train.py\n",
    "SCOREP_CUDA_ENABLE=yes python3 -m scorep train.py\n",
    "export SCOREP_CUDA_ENABLE=kernel\npython -m scorep --cuda --nocuda train.py\n",
])
def test_scp002_cuda_wanted_without_cuda_flag(tmp_path: Path, launch: str) -> None:
    out = run_check("SCP002", job(tmp_path, launch))
    assert worst(out) == Status.FAIL
    assert out[0].remedies == ("scorep-add-cuda",)
    assert out[0].data["file"].endswith("job.sbatch") and out[0].data["flag"] == "--cuda"


@pytest.mark.parametrize("launch,status", [
    ("export SCOREP_CUDA_ENABLE=kernel\npython -m scorep --cuda train.py\n", Status.PASS),
    ("export SCOREP_CUDA_ENABLE=no\npython -m scorep train.py\n", Status.PASS),
    ("python -m scorep train.py\n", Status.PASS),
    ("python train.py\n", Status.SKIP),
])
def test_scp002_negatives(tmp_path: Path, launch: str, status: Status) -> None:
    assert worst(run_check("SCP002", job(tmp_path, launch))) == status


# -- SCP003 -----------------------------------------------------------------

@pytest.mark.parametrize("value", ["4G", "4g", "4096M", "4GB", "5G", "1T"])
def test_scp003_total_memory_at_or_above_4gib(tmp_path: Path, value: str) -> None:
    out = run_check("SCP003", job(tmp_path, f"export SCOREP_TOTAL_MEMORY={value}\npython -m scorep --cuda train.py\n"))
    assert worst(out) == Status.FAIL and where(out) == [("job.sbatch", 3)]
    assert out[0].data["proposed"] == "3500M" and out[0].data["value"] == value


@pytest.mark.parametrize("value", ["4.5G", "lots", "4GiB", "''"])
def test_scp003_sizes_scorep_cannot_parse(tmp_path: Path, value: str) -> None:
    out = run_check("SCP003", job(tmp_path, f"export SCOREP_TOTAL_MEMORY={value}\npython -m scorep --cuda train.py\n"))
    assert worst(out) == Status.FAIL and "not a size" in out[0].message


@pytest.mark.parametrize("value", ["3500M", "4095M", "16M", "4294967295"])
def test_scp003_sizes_under_the_cap(tmp_path: Path, value: str) -> None:
    out = run_check("SCP003", job(tmp_path, f"export SCOREP_TOTAL_MEMORY={value}\npython -m scorep --cuda train.py\n"))
    assert worst(out) == Status.PASS


def test_scp003_inherited_from_the_environment(tmp_path: Path) -> None:
    import os

    env = {"PATH": os.environ["PATH"], "SCOREP_TOTAL_MEMORY": "8G"}
    out = run_check("SCP003", job(tmp_path, "python -m scorep --cuda train.py\n"), env=env)
    assert worst(out) == Status.FAIL and out[0].evidence[0].label == "inherited from the environment"


# -- SCP004 -----------------------------------------------------------------

def dropped(tmp_path: Path, proposed: int = 8889000) -> list[dict]:
    return [{"signature": "cupti_dropped", "file": str(tmp_path / "slurm-1.out"), "line": 12,
             "text": "[CUPTI Activity] Dropped 85222 records. Current buffer size: 1048576 bytes",
             "values": {"dropped": 85222, "current_buffer": 1048576, "proposed_buffer": proposed}}]


def test_scp004_dropped_records_propose_a_buffer_above_the_minimum(tmp_path: Path) -> None:
    root = job(tmp_path, "python -m scorep --cuda train.py\n")
    out = run_check("SCP004", root, {"logscan": dropped(tmp_path)})
    assert worst(out) == Status.FAIL and ("slurm-1.out", 12) in where(out)
    assert out[0].data["proposed"] == "64M" and out[0].data["minimum"] == 8889000


def test_scp004_dropped_records_already_covered_by_the_job(tmp_path: Path) -> None:
    root = job(tmp_path, "export SCOREP_CUDA_BUFFER=64M\npython -m scorep --cuda train.py\n")
    assert worst(run_check("SCP004", root, {"logscan": dropped(tmp_path)})) == Status.PASS


def test_scp004_eight_ranks_on_the_default_buffer(tmp_path: Path) -> None:
    root = job(tmp_path, "for r in $(seq 0 7); do\n  RANK=$r python -m scorep --cuda train.py &\ndone\nwait\n")
    out = run_check("SCP004", root)
    assert worst(out) == Status.WARN and out[0].data["ranks"] == 8 and out[0].data["proposed"] == "64M"


@pytest.mark.parametrize("launch", [
    "for r in 0 1 2 3; do RANK=$r python -m scorep --cuda train.py & done\n",
    "export SCOREP_CUDA_BUFFER=16M\nfor r in $(seq 0 7); do RANK=$r python -m scorep --cuda train.py & done\n",
])
def test_scp004_buffer_fits(tmp_path: Path, launch: str) -> None:
    assert worst(run_check("SCP004", job(tmp_path, launch))) == Status.PASS


def test_scp004_without_the_logscan_fact_still_checks_the_rank_count(tmp_path: Path) -> None:
    root = job(tmp_path, "python -m scorep --cuda train.py\n")
    out = run_check("SCP004", root, {"logscan": ProbeFailure("logscan", "error", "no provider for this fact")})
    assert worst(out) == Status.PASS and "logs not scanned" in out[0].message


def test_scp004_invalid_buffer_size(tmp_path: Path) -> None:
    out = run_check("SCP004", job(tmp_path, "export SCOREP_CUDA_BUFFER=8MiB\npython -m scorep --cuda train.py\n"))
    assert worst(out) == Status.FAIL and "not a size" in out[0].message


# -- SCP005 -----------------------------------------------------------------

def test_scp005_dashdash_with_its_line(tmp_path: Path) -> None:
    out = run_check("SCP005", job(tmp_path, "python -m scorep --cuda \\\n    -- train.py\n"))
    assert worst(out) == Status.FAIL and where(out) == [("job.sbatch", 4)]
    assert out[0].data["token_line"] == 4


def test_scp005_no_dashdash_and_dashdash_in_script_args(tmp_path: Path) -> None:
    assert worst(run_check("SCP005", job(tmp_path, "python -m scorep --cuda train.py -- --x\n"))) == Status.PASS


# -- SCP006 -----------------------------------------------------------------

@pytest.mark.parametrize("launch", [
    "for r in 0 1 2 3; do RANK=$r python -m scorep --cuda train.py & done\n",
    "export SCOREP_EXPERIMENT_DIRECTORY=trace\nfor r in 0 1; do RANK=$r python -m scorep --cuda train.py & done\n",
    "srun -n 4 python -m scorep --cuda train.py\n",
    "srun --ntasks=4 env SCOREP_EXPERIMENT_DIRECTORY=scorep_rank_$SLURM_PROCID python -m scorep --cuda train.py\n",
    "torchrun --nproc_per_node=4 --no-python python -m scorep --cuda train.py\n",
    "RANK=0 python -m scorep --cuda train.py &\nRANK=1 python -m scorep --cuda train.py &\nwait\n",
])
def test_scp006_ranks_share_an_experiment_folder(tmp_path: Path, launch: str) -> None:
    out = run_check("SCP006", job(tmp_path, launch))
    assert worst(out) == Status.FAIL, [o.message for o in out]
    assert out[0].remedies == ("scorep-per-rank-dirs",) and out[0].data["proposed"].startswith("scorep_rank_")


@pytest.mark.parametrize("launch", [
    "for r in 0 1 2 3; do RANK=$r SCOREP_EXPERIMENT_DIRECTORY=scorep_rank_$r python -m scorep --cuda train.py & done\n",
    "for r in 0 1; do\n  dir=out/scorep_rank_$r\n  SCOREP_EXPERIMENT_DIRECTORY=$dir python -m scorep --cuda train.py &\ndone\n",
    "srun -n 4 bash -c 'SCOREP_EXPERIMENT_DIRECTORY=scorep_rank_$SLURM_PROCID python -m scorep --cuda train.py'\n",
    "python -m scorep --cuda train.py\n",
    "RANK=0 SCOREP_EXPERIMENT_DIRECTORY=r0 python -m scorep --cuda train.py &\n"
    "RANK=1 SCOREP_EXPERIMENT_DIRECTORY=r1 python -m scorep --cuda train.py &\nwait\n",
])
def test_scp006_per_rank_folders(tmp_path: Path, launch: str) -> None:
    assert worst(run_check("SCP006", job(tmp_path, launch))) == Status.PASS


def test_scp006_collision_in_the_logs(tmp_path: Path) -> None:
    log = [{"signature": "experiment_collision", "file": str(tmp_path / "rank1.log"), "line": 3,
            "text": "[Score-P] File does already exist", "values": {}}]
    out = run_check("SCP006", job(tmp_path, "python -m scorep --cuda train.py\n"), {"logscan": log})
    assert worst(out) == Status.FAIL and ("rank1.log", 3) in where(out)


# -- SCP007 -----------------------------------------------------------------

@pytest.mark.parametrize("value,invalid", [("kernels,memcpy,sync", ["kernels"]), ("'kernel:memcopy;nccl'", ["memcopy", "nccl"])])
def test_scp007_entries_outside_the_accepted_set(tmp_path: Path, value: str, invalid: list[str]) -> None:
    out = run_check("SCP007", job(tmp_path, f"export SCOREP_CUDA_ENABLE={value}\npython -m scorep --cuda train.py\n"))
    assert worst(out) == Status.FAIL and out[0].data["invalid"] == invalid and where(out) == [("job.sbatch", 3)]


@pytest.mark.parametrize("value", ["kernel,memcpy,sync", "'kernel memcpy'", "default,~references", "no", "1"])
def test_scp007_accepted_values(tmp_path: Path, value: str) -> None:
    out = run_check("SCP007", job(tmp_path, f"export SCOREP_CUDA_ENABLE={value}\npython -m scorep --cuda train.py\n"))
    assert worst(out) == Status.PASS


def test_scp007_idle_and_pure_idle_exclude_each_other(tmp_path: Path) -> None:
    out = run_check("SCP007", job(tmp_path, "export SCOREP_CUDA_ENABLE=kernel,idle,pure_idle\n"
                                            "python -m scorep --cuda train.py\n"))
    assert worst(out) == Status.WARN


# -- SCP008 -----------------------------------------------------------------

PROFILED = """
import torch
from torch.profiler import ProfilerActivity, profile

def train():
    with profile(activities=[ProfilerActivity.CUDA]):
        pass
"""


@pytest.mark.parametrize("launch,train,status", [
    ("python -m scorep --cuda train.py\n", PROFILED, Status.WARN),
    ("nsys profile -o rep python -m scorep --cuda train.py\n", TRAIN, Status.FAIL),
    ("KINETO_USE_DAEMON=1 python -m scorep --cuda train.py\n", TRAIN, Status.WARN),
    ("dynolog --enable_ipc_monitor &\npython -m scorep --cuda train.py\n", TRAIN, Status.WARN),
])
def test_scp008_second_cupti_user(tmp_path: Path, launch: str, train: str, status: Status) -> None:
    out = run_check("SCP008", job(tmp_path, launch, train))
    assert worst(out) == status and out[0].remedies == ("manual-second-cupti",)


@pytest.mark.parametrize("launch,train,status", [
    ("python -m scorep --cuda train.py\n", TRAIN, Status.PASS),
    ("python -m scorep train.py\n", PROFILED, Status.SKIP),
    ("python train.py\n", PROFILED, Status.SKIP),
])
def test_scp008_negatives(tmp_path: Path, launch: str, train: str, status: Status) -> None:
    assert worst(run_check("SCP008", job(tmp_path, launch, train))) == status


# -- LNC001 -----------------------------------------------------------------

@pytest.mark.parametrize("launch,more", [
    ("python -m scorep --cuda $(which torchrun) --nproc_per_node=4 train.py\n", {}),
    ("python3 -m scorep --cuda --thread=pthread /opt/conda/bin/torchrun --nproc-per-node 4 train.py\n", {}),
    ("python -m scorep --cuda scorep_torchrun.py --nproc_per_node=4 train.py\n",
     {"scorep_torchrun.py": "from torch.distributed.run import main\nmain()\n"}),
    ("python -m scorep --cuda -m torch.distributed.launch --nproc_per_node=4 train.py\n", {}),
    ("python -m scorep --cuda $(which accelerate) launch --num_processes 4 train.py\n", {}),
])
def test_lnc001_scorep_wraps_a_spawner(tmp_path: Path, launch: str, more: dict[str, str]) -> None:
    out = run_check("LNC001", job(tmp_path, launch, **more))
    assert worst(out) == Status.FAIL and where(out)[0] == ("job.sbatch", 3)
    d = out[0].data
    assert d["nproc"] == 4 and d["script"] == str(tmp_path / "train.py") and "--cuda" in d["scorep_flags"]


@pytest.mark.parametrize("launch,status", [
    ("for r in 0 1; do RANK=$r python -m scorep --cuda train.py & done\n", Status.PASS),
    ("torchrun --nproc_per_node=4 --no-python python -m scorep --cuda train.py\n", Status.PASS),
    ("torchrun --nproc_per_node=4 train.py\n", Status.SKIP),
])
def test_lnc001_negatives(tmp_path: Path, launch: str, status: Status) -> None:
    assert worst(run_check("LNC001", job(tmp_path, launch))) == status


# -- LNC002 -----------------------------------------------------------------

WARMUP_LOOP = """for attempt in $(seq 1 30); do
    if python -c "
import torch, sys
try:
    torch.zeros(1).cuda()
except Exception:
    sys.exit(1)
"; then break; fi
    sleep 10
done
"""


@pytest.mark.parametrize("before", ["", "nvidia-smi\n", 'python -c "import torch; assert torch.cuda.is_available()"\n',
                                    "python -m scorep --cuda train.py\n"])
def test_lnc002_no_warmup(tmp_path: Path, before: str) -> None:
    out = run_check("LNC002", job(tmp_path, before + "python -m scorep --cuda train.py\n"))
    assert worst(out) == Status.WARN and out[0].remedies == ("cuda-warmup",)  # a warm node: a risk
    assert out[0].data["insert_before_line"] == 3 + before.count("\n") - (1 if "scorep" in before else 0)


@pytest.mark.parametrize("before,status", [
    (WARMUP_LOOP, Status.PASS),
    ("python - <<'EOF'\nimport torch\ntorch.zeros(1).cuda()\nEOF\n", Status.WARN),
    ("gpu-doctor --check-only\n", Status.PASS),
])
def test_lnc002_warmups(tmp_path: Path, before: str, status: Status) -> None:
    assert worst(run_check("LNC002", job(tmp_path, before + "python -m scorep --cuda train.py\n"))) == status


def test_lnc002_warmup_in_a_warmup_script_file(tmp_path: Path) -> None:
    root = job(tmp_path, "until python3 warmup.py; do sleep 5; done\npython -m scorep --cuda train.py\n",
               **{"warmup.py": "import torch\ntorch.cuda.init()\ntorch.zeros(1, device='cuda')\n"})
    assert worst(run_check("LNC002", root)) == Status.PASS


# -- LNC003 -----------------------------------------------------------------

BROKEN = {"cuda_runtime": {"state": "never_ready", "attempts": [], "last": {}}}


def test_lnc003_broken_node_not_excluded(tmp_path: Path) -> None:
    out = run_check("LNC003", job(tmp_path, "python -m scorep --cuda train.py\n"), BROKEN, host="node07.cluster")
    assert worst(out) == Status.FAIL and out[0].data["node"] == "node07" and out[0].data["line"] == 2


@pytest.mark.parametrize("directive,status", [
    ("#SBATCH --exclude=node[05-09]\n", Status.PASS),
    ("#SBATCH -x node07\n", Status.PASS),
    ("#SBATCH --exclude=node08\n", Status.FAIL),
    ("#SBATCH --nodelist=node07\n", Status.FAIL),
])
def test_lnc003_exclude_and_nodelist(tmp_path: Path, directive: str, status: Status) -> None:
    root = write_job(tmp_path, {"job.sbatch": f"#!/bin/bash\n{directive}python -m scorep --cuda train.py\n",
                                "train.py": TRAIN})
    assert worst(run_check("LNC003", root, BROKEN, host="node07")) == status


def test_lnc003_healthy_or_unknown_runtime(tmp_path: Path) -> None:
    root = job(tmp_path, "python train.py\n")
    assert worst(run_check("LNC003", root)) == Status.PASS
    unknown = {"cuda_runtime": ProbeFailure("cuda_runtime", "timeout", "budget spent")}
    assert worst(run_check("LNC003", root, unknown)) == Status.UNKNOWN


def test_hostlist_expansion() -> None:
    from checks.launcher import hostlist

    assert hostlist("node[01-03,07],gpu5") == {"node01", "node02", "node03", "node07", "gpu5"}
    assert hostlist("a[1-2]b") == {"a1b", "a2b"}


# -- SCR001 -----------------------------------------------------------------

@pytest.mark.parametrize("imp", [
    "import scorep.user\n", "import scorep.user as su\n", "from scorep import user\n",
    "try:\n    import scorep.user\nexcept ImportError:\n    pass\n",
    "import os\nif os.environ.get('SCOREP'):\n    import scorep.user\n",
])
def test_scr001_module_level_import_in_a_torchrun_worker(tmp_path: Path, imp: str) -> None:
    root = job(tmp_path, "python -m scorep --cuda $(which torchrun) --nproc_per_node 4 train.py\n", imp + DDP_TRAIN)
    out = run_check("SCR001", root, {"logscan": ERROR_802_LOG})
    assert worst(out) == Status.FAIL and out[0].remedies == ("lazy-scorep-import",)
    assert out[0].data["file"] == str(tmp_path / "train.py")


def test_scr001_import_in_a_local_module_the_worker_imports(tmp_path: Path) -> None:
    root = job(tmp_path, "python -m scorep --cuda $(which torchrun) --nproc_per_node 4 train.py\n",
               "from utils.regions import step_region\n" + DDP_TRAIN,
               **{"utils/__init__.py": "", "utils/regions.py": "from scorep import user\n"})
    out = run_check("SCR001", root)
    assert worst(out) == Status.WARN  # a warm node: a risk
    assert where(out) == [("utils/regions.py", 1), ("train.py", 1), (None, None)]


@pytest.mark.parametrize("train,launch,status", [
    ("def step():\n    import scorep.user\n" + DDP_TRAIN, "torchrun --nproc_per_node 4 train.py\n", Status.PASS),
    ("import scorep.user\nprint('single process')\n", "python -m scorep train.py\n", Status.PASS),
    ("import scorep.user\n" + DDP_TRAIN, "for r in 0 1; do RANK=$r python -m scorep --cuda train.py & done\n",
     Status.PASS),
])
def test_scr001_negatives_and_per_rank_warning(tmp_path: Path, train: str, launch: str, status: Status) -> None:
    assert worst(run_check("SCR001", job(tmp_path, launch, train))) == status


ERROR_802_LOG = [{"signature": "cuda_802", "file": "rank_1.log", "line": 12, "values": {"code": 802},
                  "text": "RuntimeError: CUDA error: system not yet initialized (802)"}]


# -- SCR002 -----------------------------------------------------------------

HF_NO_DESTROY = """
from transformers import Trainer, TrainingArguments

def main():
    trainer = Trainer(model=None, args=TrainingArguments(output_dir="o"))
    trainer.train()

if __name__ == "__main__":
    main()
"""


def test_scr002_hf_trainer_under_torchrun_without_destroy(tmp_path: Path) -> None:
    root = job(tmp_path, "python -m scorep --cuda $(which torchrun) --nproc_per_node 4 train.py\n", HF_NO_DESTROY)
    out = run_check("SCR002", root)
    assert worst(out) == Status.FAIL and where(out) == [("train.py", 5), ("job.sbatch", 3)]
    assert out[0].data["function"] == "main" and out[0].data["insert_after_line"] == 5


def test_scr002_without_scorep_is_a_warning(tmp_path: Path) -> None:
    root = job(tmp_path, "torchrun --nproc_per_node 4 train.py\n",
               "import torch.distributed as dist\ndist.init_process_group('nccl')\n")
    assert worst(run_check("SCR002", root)) == Status.WARN


@pytest.mark.parametrize("train,launch", [
    (DDP_TRAIN, "torchrun --nproc_per_node 4 train.py\n"),
    (HF_NO_DESTROY + "\nimport torch.distributed as dist\ndist.destroy_process_group()\n",
     "torchrun --nproc_per_node 4 train.py\n"),
    ("print('no ddp')\n", "python train.py\n"),
])
def test_scr002_negatives(tmp_path: Path, train: str, launch: str) -> None:
    assert worst(run_check("SCR002", job(tmp_path, launch, train))) == Status.PASS


# -- SCR003 -----------------------------------------------------------------

def test_scr003_self_wait_in_a_local_module(tmp_path: Path) -> None:
    root = job(tmp_path, "python train.py\n", "import metrics\n", **{"metrics.py": """
        import torch
        def push(stream, buf, x):
            with torch.cuda.stream(stream):
                stream.wait_stream(torch.cuda.current_stream())
                buf.copy_(x, non_blocking=True)
        """})
    out = run_check("SCR003", root)
    assert worst(out) == Status.FAIL and where(out) == [("metrics.py", 4), ("metrics.py", 3)]
    assert out[0].data["proposed"] == "producer_stream = torch.cuda.current_stream()"


def test_scr003_captured_producer_passes(tmp_path: Path) -> None:
    root = job(tmp_path, "python train.py\n", """
        import torch
        def push(stream, buf, x):
            producer = torch.cuda.current_stream()
            with torch.cuda.stream(stream):
                stream.wait_stream(producer)
        """)
    assert worst(run_check("SCR003", root)) == Status.PASS


# -- SCR004 -----------------------------------------------------------------

def test_scr004_assert_in_the_warmup_snippet_fails_in_training_code_warns(tmp_path: Path) -> None:
    root = job(tmp_path, 'python -c "import torch; assert torch.cuda.is_available(); torch.zeros(1).cuda()"\n'
                         "python train.py\n", "import torch\nassert torch.cuda.is_available()\n")
    out = run_check("SCR004", root)
    by_file = {o.evidence[0].file: o.status for o in out}
    assert by_file == {"job.sbatch": Status.FAIL, "train.py": Status.WARN}
    assert where(out, Status.FAIL) == [("job.sbatch", 3)]


def test_scr004_real_op_passes(tmp_path: Path) -> None:
    root = job(tmp_path, 'python -c "import torch; torch.zeros(1).cuda()"\npython train.py\n')
    assert worst(run_check("SCR004", root)) == Status.PASS


# -- TRN001 -----------------------------------------------------------------

@pytest.mark.parametrize("flags", [
    "--evaluation_strategy no --load_best_model_at_end True",
    "--eval_strategy=no --load_best_model_at_end",
    "--load_best_model_at_end=true",
    "--load_best_model_at_end yes --save_strategy epoch --eval_strategy steps",
    "--eval_strategy steps --save_strategy steps --eval_steps 300 --save_steps 500 --load_best_model_at_end",
])
def test_trn001_cli_conflicts(tmp_path: Path, flags: str) -> None:
    out = run_check("TRN001", job(tmp_path, f"torchrun --nproc_per_node 2 train.py \\\n  {flags}\n"))
    assert worst(out) == Status.FAIL and out[0].remedies == ("trainer-lbm-off",)
    assert out[0].data["line"] == 4 and out[0].data["source"] == "cli"


@pytest.mark.parametrize("flags", [
    "--evaluation_strategy no --load_best_model_at_end False",
    "--load_best_model_at_end --eval_strategy epoch --save_strategy epoch",
    "--load_best_model_at_end --eval_strategy steps --eval_steps 100 --save_steps 500",
    "--load_best_model_at_end --save_strategy best",
    "--evaluation_strategy no",
])
def test_trn001_cli_consistent(tmp_path: Path, flags: str) -> None:
    assert worst(run_check("TRN001", job(tmp_path, f"torchrun --nproc_per_node 2 train.py {flags}\n"))) == Status.PASS


@pytest.mark.parametrize("name,content,line", [
    ("args.json", '{\n  "output_dir": "out",\n  "load_best_model_at_end": true,\n  "eval_strategy": "no"\n}\n', 3),
    ("args.yaml", "output_dir: out\nsave_strategy: epoch\nload_best_model_at_end: true\n", 3),
])
def test_trn001_config_files(tmp_path: Path, name: str, content: str, line: int) -> None:
    root = job(tmp_path, f"torchrun --nproc_per_node 2 train.py {name}\n", **{name: content})
    out = run_check("TRN001", root)
    assert worst(out) == Status.FAIL and (name, line) in where(out) and out[0].data["source"] == "config"


def test_trn001_training_arguments_keywords(tmp_path: Path) -> None:
    root = job(tmp_path, "python train.py\n", """
        from transformers import TrainingArguments
        args = TrainingArguments(
            output_dir="out",
            save_strategy="epoch",
            load_best_model_at_end=True,
        )
        ok = TrainingArguments(output_dir="o", eval_strategy="epoch", save_strategy="epoch",
                               load_best_model_at_end=True)
        """)
    out = run_check("TRN001", root)
    assert [o.status for o in out] == [Status.FAIL, Status.PASS]
    assert out[0].data["line"] == 5 and out[0].data["source"] == "code"


def test_trn001_unknown_values_are_not_guessed(tmp_path: Path) -> None:
    root = job(tmp_path, "torchrun --nproc_per_node 2 train.py --load_best_model_at_end --eval_strategy $EVAL\n")
    assert worst(run_check("TRN001", root)) == Status.UNKNOWN


# -- TRN002 -----------------------------------------------------------------

NO_CUDA = {"framework": {"ok": False, "error": "RuntimeError: CUDA error 802: system not ready",
                         "torch_cuda": "12.1", "device_count": 0}}


@pytest.mark.parametrize("launch,extra", [
    ("torchrun --nproc_per_node 2 train.py --fp16\n", {}),
    ("torchrun --nproc_per_node 2 train.py --bf16 True\n", {}),
    ("accelerate launch --mixed_precision fp16 train.py\n", {}),
    ("python train.py cfg.json\n", {"cfg.json": '{"fp16": true}'}),
])
def test_trn002_mixed_precision_without_cuda(tmp_path: Path, launch: str, extra: dict[str, str]) -> None:
    out = run_check("TRN002", job(tmp_path, launch, **extra), NO_CUDA)
    assert worst(out) == Status.FAIL and "GPU003" in out[0].message and out[0].remedies == ("cuda-warmup",)


def test_trn002_cases(tmp_path: Path) -> None:
    root = job(tmp_path, "torchrun --nproc_per_node 2 train.py --fp16\n")
    assert worst(run_check("TRN002", root)) == Status.PASS
    failed = {"framework": ProbeFailure("framework", "error", "python not found")}
    out = run_check("TRN002", root, failed)
    assert worst(out) == Status.UNKNOWN and "GPU004" in out[0].message
    plain = job(tmp_path / "plain", "torchrun --nproc_per_node 2 train.py --fp16 False\n")
    assert worst(run_check("TRN002", plain, NO_CUDA)) == Status.PASS


def test_every_non_pass_outcome_has_evidence_and_a_remedy_or_reason(tmp_path: Path) -> None:
    from jobfolder_util import EXAMPLES, JOB_CHECKS

    for cid in JOB_CHECKS:
        for o in bad(run_check(cid, EXAMPLES / "scorep-ddp-broken", NO_CUDA)):
            assert o.evidence, (cid, o.message)
            if o.status in (Status.FAIL, Status.WARN) and cid != "TRN002":
                assert o.remedies, (cid, o.message)


def test_scp006_mpi_measurement_shares_one_experiment_by_design(tmp_path: Path) -> None:
    for launch in ("srun -n 4 python -m scorep --mpi --cuda train.py\n",
                   "mpirun -np 4 python -m scorep --mpp=mpi --cuda train.py\n"):
        out = run_check("SCP006", job(tmp_path / str(len(launch)), launch))
        assert worst(out) == Status.PASS and "MPI" in out[0].message


def test_sbatch_export_sets_the_job_environment(tmp_path: Path) -> None:
    root = write_job(tmp_path, {"job.sbatch": "#!/bin/bash\n#SBATCH --export=ALL,SCOREP_TOTAL_MEMORY=4G\n"
                                              "python -m scorep --cuda train.py\n", "train.py": TRAIN})
    out = run_check("SCP003", root)
    assert worst(out) == Status.FAIL and where(out) == [("job.sbatch", 2)]


def test_trn002_on_a_host_without_a_driver_leaves_the_verdict_to_the_gpu_node(tmp_path: Path) -> None:
    root = job(tmp_path, "torchrun --nproc_per_node 2 train.py --fp16\n")
    login_node = {**NO_CUDA, "nvml": {"driver_loaded": False, "error": "NVML Shared Library Not Found",
                                      "gpus": []}}
    out = run_check("TRN002", root, login_node)
    assert worst(out) == Status.SKIP and "GPU node" in out[0].message


def test_trn002_when_torch_is_not_importable_says_unknown_not_fail(tmp_path: Path) -> None:
    root = job(tmp_path, "torchrun --nproc_per_node 2 train.py --fp16\n")
    no_torch = {"framework": {"ok": False, "import_error": "ModuleNotFoundError: No module named 'torch'",
                              "python": "/usr/bin/python3", "torch_cuda": None}}
    out = run_check("TRN002", root, no_torch)
    assert worst(out) == Status.UNKNOWN and "--python" in out[0].message


def test_trn002_does_not_pass_when_a_training_script_cannot_be_read(tmp_path: Path) -> None:
    root = write_job(tmp_path, {"job.sh": "#!/bin/bash\ntorchrun --nproc_per_node 2 train.py\n",
                                "train.py": "def broken(:\n    pass\n"})
    out = run_check("TRN002", root)
    assert worst(out) == Status.UNKNOWN and "train.py" in out[0].message
