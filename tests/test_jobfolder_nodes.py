"""Nodes × tasks per node for every launch (doctor.jobfolder.queries.layout): read from #SBATCH,
srun -N/-n/--ntasks-per-node, torchrun --nnodes/--nproc_per_node, mpirun's hosts, and a Python
launcher's own settings (submitit, Lightning); shown as `nodes` and `tasks_per_node` on every
process of `job.processes`; LNC004 counts the nodes submitit asks for; the warm-up step that
runs on every node names the node whose runtime never became ready."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import jsonschema
import pytest
from jobfolder_util import job_of, run_check, write_job
from test_multinode_ifname import fact

from doctor.jobfolder.processes import job_json
from doctor.jobfolder.queries import layout
from doctor.model import Status

REPO = Path(__file__).resolve().parent.parent
TRAIN = "import torch\nimport torch.distributed as dist\ndist.init_process_group('nccl')\n"


def layouts(tmp_path: Path, files: dict[str, str]) -> list[tuple[int | None, int | None]]:
    job = job_of(write_job(tmp_path, {"train.py": TRAIN, **files}))
    return [(lay.nodes, lay.tasks_per_node) for lay in
            (layout(job, c, c.instrumented or c.launch) for c in job.commands if c.launch is not None)]


@pytest.mark.parametrize("header, line, expected", [
    ("#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=4\n", "srun python train.py", (2, 4)),
    ("#SBATCH -N 2\n#SBATCH --ntasks=8\n", "srun python train.py", (2, 4)),
    ("#SBATCH --nodes=2\n", "srun python train.py", (2, 1)),  # Slurm's default: one task per node
    ("#SBATCH --nodes=4\n#SBATCH --ntasks-per-node=4\n", "srun -N 2 -n 2 python train.py", (2, 1)),
    ("#SBATCH --nodes=3\n", 'srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 python train.py', (3, 1)),
    ("#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=1\n",
     "srun torchrun --nnodes=$SLURM_NNODES --nproc_per_node=4 train.py", (2, 4)),
    ("", "torchrun --nnodes=1:4 --nproc-per-node=2 train.py", (4, 2)),
    ("", "mpirun -np 8 -H gpu01:4,gpu02:4 python train.py", (2, 4)),
    ("", "mpirun -np 6 --hostfile hosts.txt --map-by ppr:2:node python train.py", (3, 2)),
    ("", "python train.py", (1, 1)),
])
def test_the_nodes_and_tasks_of_a_launch(tmp_path: Path, header: str, line: str,
                                         expected: tuple[int, int]) -> None:
    hosts = "# three nodes\ngpu01 slots=4\ngpu02 slots=4\ngpu03:4\n"
    assert layouts(tmp_path, {"job.sh": f"#!/bin/bash\n{header}{line}\n", "hosts.txt": hosts}) == [expected]


SUBMIT = """\
import submitit

from train import main

executor = submitit.AutoExecutor(folder="logs/%j")
executor.update_parameters(slurm_partition="gpu", slurm_nodes=8, tasks_per_node=4, gpus_per_node=4,
                           timeout_min=60)
job = executor.submit(main)
print(job.job_id)
"""
LIGHTNING = """\
import lightning as L

trainer = L.Trainer(accelerator="gpu", devices=4, num_nodes=2, strategy="ddp")
"""


def test_a_python_launcher_says_its_own_nodes_and_tasks(tmp_path: Path) -> None:
    assert layouts(tmp_path / "submitit", {"launch.sh": "#!/bin/bash\npython submit.py\n",
                                           "submit.py": SUBMIT}) == [(8, 4)]
    assert layouts(tmp_path / "lightning", {"run.sh": "#!/bin/bash\npython fit.py\n",
                                            "fit.py": LIGHTNING}) == [(2, 4)]


SUBMIT_ARGS = """\
import argparse

import submitit

from train import main

parser = argparse.ArgumentParser()
parser.add_argument("--nodes", type=int, default=2)
parser.add_argument("--ngpus", default=8, type=int, help="GPUs per node")
args = parser.parse_args()
num_gpus_per_node = args.ngpus
executor = submitit.SlurmExecutor(folder="logs")
executor.update_parameters(nodes=args.nodes, ntasks_per_node=num_gpus_per_node, gpus_per_node=8)
executor.submit(main)
"""


@pytest.mark.parametrize("line, expected", [
    ("python submit.py", (2, 8)),  # argparse's defaults
    ("python submit.py --nodes 8 --ngpus 4", (8, 4)),
    ("python submit.py --nodes=8 --ngpus=4", (8, 4)),
    ("python submit.py --nodes $N", (None, 8)),  # known only when the job runs: not the default
])
def test_submitit_counts_written_as_options_are_the_command_lines_or_the_defaults(
        tmp_path: Path, line: str, expected: tuple[int | None, int]) -> None:
    got = layouts(tmp_path, {"launch.sh": f"#!/bin/bash\n{line}\n", "submit.py": SUBMIT_ARGS})
    assert got == [expected]


def test_a_submitit_count_says_where_it_came_from(tmp_path: Path) -> None:
    job = job_of(write_job(tmp_path, {"launch.sh": "#!/bin/bash\npython submit.py --nodes 8\n",
                                      "submit.py": SUBMIT_ARGS, "train.py": TRAIN}))
    (cmd,) = [c for c in job.commands if c.launch is not None]
    lay = layout(job, cmd, cmd.launch)
    assert lay.how == "update_parameters(nodes=args.nodes) at submit.py:13 (--nodes 8 on the command line)"
    assert (lay.nodes, lay.tasks_per_node) == (8, 8)  # --ngpus: its default, 8


def test_the_script_a_submitit_command_runs_is_read_as_every_task_runs_it(tmp_path: Path) -> None:
    job = job_of(write_job(tmp_path, {
        "launch.sh": "#!/bin/bash\nexport SCOREP_TOTAL_MEMORY=3500M\npython submit.py --nodes 8 --ngpus 4\n",
        "submit.py": SUBMIT_ARGS.replace("from train import main\n", "").replace(
            "executor.submit(main)", 'task = submitit.helpers.CommandFunction(["bash", "task.sh", str(args.nodes)])\n'
                                     "executor.submit(task)"),
        "task.sh": "#!/bin/bash\nexec python -m scorep --cuda train.py --tag \"$1\"\n", "train.py": TRAIN}))
    (cmd, launch), = job.instrumented  # task.sh is not a job of its own
    assert cmd.site.file.endswith("task.sh") and cmd.per_task and [w.name for w in cmd.wrappers] == ["srun", "exec"]
    lay = layout(job, cmd, launch)
    assert (lay.nodes, lay.tasks_per_node, lay.world) == (8, 4, 32)
    assert lay.how == "submitit's srun, update_parameters(nodes=args.nodes) at submit.py:12 (--nodes 8 on the command line)"
    assert cmd.env["SCOREP_TOTAL_MEMORY"].value == "3500M"  # the launcher's environment reaches every task
    assert cmd.argv[-1] == "str(args.nodes)" and not cmd.argv_words[-1].known


def test_lnc004_counts_the_nodes_submitit_asks_for(tmp_path: Path) -> None:
    root = write_job(tmp_path, {"launch.sh": "#!/bin/bash\nexport MASTER_ADDR=gpu011\npython submit.py\n",
                                "submit.py": SUBMIT, "train.py": "def main():\n    pass\n"})
    [out] = run_check("LNC004", root, {"socket_route": fact(("127.0.1.1",))}, host="gpu012")
    assert out.status == Status.FAIL, out.message
    assert "one node" not in out.message
    said = [(e.file, e.line, e.text) for e in out.evidence]
    assert ("launch.sh", 3, "python submit.py  (8 nodes × 4 tasks: update_parameters(slurm_nodes=8) at "
            "submit.py:6)") in said, said


def test_every_process_says_its_nodes_and_tasks_per_node(tmp_path: Path) -> None:
    job = job_of(write_job(tmp_path, {"job.sbatch": """\
        #!/bin/bash
        #SBATCH --nodes=2
        #SBATCH --ntasks-per-node=4
        export SCOREP_EXPERIMENT_DIRECTORY=/scratch/$USER/scorep/resnet_$SLURM_JOB_ID
        srun python -m scorep --cuda train.py
        """, "train.py": TRAIN}))
    schema = json.loads((REPO / "doctor" / "schemas" / "gate.schema.json").read_text())
    tree = job_json(job)["processes"]
    jsonschema.validate(tree, {"type": "array", "items": {"$ref": "#/$defs/process"}, "$defs": schema["$defs"]})
    (script,) = tree
    (srun,) = script["children"]
    assert (script["nodes"], script["tasks_per_node"], script["sbatch"]["nodes"]) == (1, 1, "2")  # the batch shell
    assert (srun["nodes"], srun["tasks_per_node"], srun["ranks"]) == (2, 4, 8)
    assert srun["ranks_how"] == "srun starts 8 tasks (2 nodes × 4 tasks, from #SBATCH)"


def test_the_warm_up_on_every_node_names_the_node_that_never_became_ready(tmp_path: Path) -> None:
    from remedies.launch import node_warmup_block

    block = "\n".join(node_warmup_block("python"))
    body = re.search(r"bash -c '\n(.*)\n' \|\| exit 1", block, re.S)
    assert body and "--ntasks-per-node=1" in block, block
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").write_text("#!/bin/sh\nexit 1\n")  # a runtime that never answers
    (bin_dir / "python").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "WARMUP_ATTEMPTS": "2", "WARMUP_SLEEP": "0"}
    proc = subprocess.run(["bash", "-c", body.group(1)], env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1
    host = os.uname().nodename
    assert f"CUDA runtime never became ready on {host}: exclude this node" in proc.stderr
    assert "attempt 2/2" in proc.stdout


BY_HAND = """\
#!/bin/bash
# started by hand on each of the two nodes: NODE_RANK=0 on gpu01, 1 on gpu02
export SCOREP_TOTAL_MEMORY=3500M
export SCOREP_CUDA_BUFFER=64M
python -m scorep --cuda $(which torchrun) --nnodes=2 --node_rank=$NODE_RANK --nproc_per_node=4 \\
    --master_addr=gpu01 --master_port=29500 train.py
"""


def test_a_script_started_on_every_node_warms_its_own_node_and_keeps_torchrun(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from doctor.cli import main

    root = write_job(tmp_path, {"run.sh": BY_HAND, "train.py": TRAIN})
    assert main(["fix", str(root), "--apply", "--unsafe"]) == 0
    said = capsys.readouterr()
    assert "per-rank-launch: verified" in said.out + said.err and "cuda-warmup: verified" in said.out + said.err
    fixed = (root / "run.sh").read_text()
    assert "srun" not in fixed and "mpirun" not in fixed  # no allocation to start one task per node from
    assert "--no-python ./scorep_rank.sh train.py" in fixed and fixed.index("cuda_ready=0") < fixed.index("torchrun")
    assert "nothing but torchrun's rendezvous assigns the ranks here" in (root / "scorep_rank.sh").read_text()


def test_art003_expects_the_ranks_of_every_node(tmp_path: Path) -> None:
    from doctor.artifacts.jobinfo import expected_ranks

    job = job_of(write_job(tmp_path, {"job.sbatch": "#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=4\n"
                                                    "srun python -m scorep --cuda train.py\n", "train.py": TRAIN}))
    found = expected_ranks(job)
    assert found is not None and found[0] == 8
    assert found[1].text.startswith("8 ranks (2 nodes × 4 tasks, #SBATCH)"), found[1].text


def test_an_mpirun_over_two_hosts_gets_the_base_folder_its_ranks_read(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Open MPI hands the other host's ranks only what `-x` names: the per-rank folder's base
    (and a new SCOREP_CUDA_BUFFER) go on the list."""
    from doctor.cli import main

    root = write_job(tmp_path, {"run.sh": """\
        #!/bin/bash
        export SCOREP_TOTAL_MEMORY=3500M
        export SCOREP_EXPERIMENT_DIRECTORY=/scratch/$USER/scorep/bert
        mpirun -np 8 -H gpu01:4,gpu02:4 -x MASTER_ADDR=gpu01 -x MASTER_PORT=29555 -x SCOREP_TOTAL_MEMORY \\
            python -m scorep --cuda train.py
        """, "train.py": TRAIN})
    assert main(["fix", str(root), "--apply", "--unsafe", "--only", "scorep-per-rank-dirs", "scorep-cuda-buffer"]) == 0
    said = capsys.readouterr()
    assert "scorep-per-rank-dirs: verified" in said.err + said.out
    text = (root / "run.sh").read_text()
    assert "mpirun -x SCOREP_CUDA_BUFFER -x SCOREP_EXPERIMENT_DIRECTORY -np 8" in text or \
        "mpirun -x SCOREP_EXPERIMENT_DIRECTORY -x SCOREP_CUDA_BUFFER -np 8" in text, text
