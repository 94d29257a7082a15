"""What the recording shims make of the launch spellings the static reading misses or drops: a
`while` loop over ranks, a modulefile in the job folder (Lua and Tcl), `srun $ARGS bash -c "$CMD"`,
container wrappers, `mpirun -x`, `torchrun --no-python` running a wrapper per worker."""

from __future__ import annotations

from pathlib import Path

import pytest
from jobfolder_util import case_for, write_job

from doctor.jobfolder.discover import load_job
from doctor.jobfolder.model import Command, Job
from doctor.jobfolder.processes import job_json
from doctor.observe import sandbox

pytestmark = pytest.mark.skipif(sandbox.kind() is None, reason="neither bubblewrap nor unshare works here")


def observed(root: Path, files: dict[str, str], executable: tuple[str, ...] = ()) -> Job:
    write_job(root, files)
    for name in executable:
        (root / name).chmod(0o755)
    return load_job(case_for(root, options={"observe": True}))


def launch(job: Job, line: int) -> Command:
    (cmd,) = [c for c in job.commands if c.launch is not None and c.site.line == line]
    assert cmd.read == "observed"
    return cmd


def test_a_while_loop_over_ranks_gives_each_rank_its_folder(tmp_path: Path) -> None:
    job = observed(tmp_path, {"run.sh": """
        #!/bin/bash
        rank=0
        while [ $rank -lt 4 ]; do
            SCOREP_EXPERIMENT_DIRECTORY=scorep_rank_$rank RANK=$rank python -m scorep --cuda train.py &
            rank=$((rank+1))
        done
        wait
    """, "train.py": "print(1)\n"})
    cmd = launch(job, 4)
    assert cmd.env["SCOREP_EXPERIMENT_DIRECTORY"].varies and cmd.env["RANK"].varies
    assert cmd.loop is not None and cmd.loop.count == 4 and cmd.background
    node = job_json(job)["processes"][0]["children"][0]
    assert node["ranks"] == 4 and node["read"] == "observed"


@pytest.mark.parametrize("modulefile, text", [
    ("modules/scorep-site.lua", 'setenv("SCOREP_TOTAL_MEMORY", "8G")\nprepend_path("PATH", "/opt/x/bin")\n'),
    ("modules/scorep-site", '#%Module1.0\nsetenv SCOREP_TOTAL_MEMORY 8G\nprepend-path PATH /opt/x/bin\n'),
])
def test_a_modulefile_in_the_job_folder_sets_what_it_says(modulefile: str, text: str, tmp_path: Path) -> None:
    job = observed(tmp_path, {"job.sh": """
        #!/bin/bash
        module use "$PWD/modules"
        module load scorep-site
        srun -n 2 python -m scorep --cuda train.py
    """, modulefile: text, "train.py": "print(1)\n"})
    var = launch(job, 4).env["SCOREP_TOTAL_MEMORY"]
    assert var.value == "8G" and var.site is not None  # the modulefile's own line, which a remedy edits
    assert (var.site.file, var.site.line) == (str(tmp_path / modulefile), 2 if "Module" in text else 1)


def test_a_missing_module_is_noted(tmp_path: Path) -> None:
    job = observed(tmp_path, {"job.sh": "#!/bin/bash\nmodule load nosuchmodule/1.0\npython train.py\n",
                              "train.py": "print(1)\n"})
    assert any("module 'nosuchmodule/1.0' not found" in n for n in job.observed_notes)


def test_srun_bash_c_of_a_variable_is_read_as_the_launch_it_runs(tmp_path: Path) -> None:
    job = observed(tmp_path, {"job.sh": """
        #!/bin/bash
        #SBATCH --ntasks-per-node=4
        SRUN_ARGS="--cpu-bind=cores"
        CMD="python -m scorep --cuda train.py --epochs 1"
        srun $SRUN_ARGS bash -c "$CMD"
    """, "train.py": "print(1)\n"})
    cmd = next(c for c in job.commands if c.launch is not None and c.read == "observed")
    assert cmd.launch is not None and cmd.launch.scorep is not None
    assert cmd.launch.training_target == "train.py" and cmd.per_task


@pytest.mark.parametrize("wrapper, name", [
    ("srun shifter --image=docker:nvcr.io/nvidia/pytorch:24.05-py3", "shifter"),
    ("srun singularity exec --nv pytorch.sif", "singularity"),
    ("srun apptainer exec -B /scratch pytorch.sif", "apptainer"),
    ("srun podman run --rm -v $PWD:/work nvcr.io/nvidia/pytorch:24.05-py3", "podman"),
])
def test_a_container_wrapper_is_recorded_and_the_command_inside_observed(wrapper: str, name: str,
                                                                        tmp_path: Path) -> None:
    job = observed(tmp_path, {"job.sh": f"#!/bin/bash\n#SBATCH -n 2\nexport SCOREP_TOTAL_MEMORY=3500M\n"
                                        f"{wrapper} python -m scorep --cuda train.py\n",
                              "train.py": "print(1)\n"})
    cmd = launch(job, 4)
    assert cmd.launch is not None and cmd.launch.scorep is not None and cmd.launch.training_target == "train.py"
    assert name in [w.name for w in cmd.wrappers] and cmd.env["SCOREP_TOTAL_MEMORY"].value == "3500M"


def test_mpirun_gives_each_task_its_rank_and_the_variables_of_x(tmp_path: Path) -> None:
    job = observed(tmp_path, {"job.sh": "#!/bin/bash\nmpirun -np 4 -x SCOREP_ENABLE_TRACING=true bash ./task.sh\n",
                              "task.sh": "#!/bin/bash\nexport SCOREP_EXPERIMENT_DIRECTORY=scorep_rank_"
                                         "${OMPI_COMM_WORLD_RANK:-$PMI_RANK}\npython -m scorep train.py\n",
                              "train.py": "print(1)\n"})
    (cmd,) = [c for c in job.commands if c.launch is not None]
    assert cmd.env["SCOREP_EXPERIMENT_DIRECTORY"].varies
    assert cmd.env["SCOREP_ENABLE_TRACING"].value == "true"


def test_torchrun_no_python_runs_its_wrapper_once_per_worker(tmp_path: Path) -> None:
    job = observed(tmp_path, {"run.sh": "#!/bin/bash\ntorchrun --nproc_per_node=2 --no-python ./w.sh train.py\n",
                              "w.sh": "#!/bin/bash\nexport SCOREP_EXPERIMENT_DIRECTORY=scorep_rank_$RANK\n"
                                      "exec python -m scorep --cuda \"$@\"\n",
                              "train.py": "print(1)\n"}, executable=("w.sh",))
    worker = next(c for c in job.commands if c.site.file.endswith("w.sh") and c.launch is not None)
    assert worker.read == "observed" and worker.env["SCOREP_EXPERIMENT_DIRECTORY"].varies


def test_the_simulated_tasks_are_bounded_and_the_model_says_so(tmp_path: Path) -> None:
    job = observed(tmp_path, {"job.sh": "#!/bin/bash\nsrun -n 64 bash ./task.sh\n",
                              "task.sh": "#!/bin/bash\nSCOREP_EXPERIMENT_DIRECTORY=scorep_rank_$SLURM_PROCID "
                                         "python -m scorep train.py\n", "train.py": "print(1)\n"})
    assert "job.sh:2: srun starts 64 tasks; the first 4 were run to read what each task runs" in job.observed_notes
    (cmd,) = [c for c in job.commands if c.launch is not None]
    assert cmd.env["SCOREP_EXPERIMENT_DIRECTORY"].varies
