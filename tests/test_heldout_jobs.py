"""Held-out job folders: launch spellings from HPC centres and public training repos that the job
model was not tuned on, each as a `broken` and a `clean` variant (tests/fixtures/heldout/).

torchtitan's run_train.sh (`${CONFIG_FILE:-...}`, `overrides="$*"`, `-m torchtitan.train`), an srun
wrapper mapping SLURM_PROCID to RANK, an MPI per-rank Score-P wrapper picking its rank from
OMPI_COMM_WORLD_RANK / PMI_RANK / SLURM_PROCID, a job array taking its config from a bash array,
`case "$MODE"` with MODE set above, `if [ "$PROFILE" = 1 ]` choosing the launcher in a variable,
`srun --export=ALL,NAME=value`, `mpirun -np 4 -x ... python -m scorep`, a per-task script the job writes with a here-document,
`export $(grep -v '^#' scorep.env | xargs)`, a shell function around srun, accelerate, nanoGPT, deepspeed,
a C-style per-rank loop, HF Trainer arguments in an array and a string, a two-node torchrun
rendezvous with a `--no-python` wrapper, `cd "$SLURM_SUBMIT_DIR"` + `module load`; and (issue 24) a
`while [ $rank -lt $ngpus ]` loop over ranks, Lua and Tcl modulefiles in the job folder, `srun $SRUN_ARGS
bash -c "$CMD"`, a job script in a sub-folder launching `train.py` from there, `srun shifter`, `singularity
exec`, `apptainer exec --env`, a `TrainingArguments` subclass's `field(default=True)`, a `python -c`
readiness test in a warm-up loop, `--nopython`, and `eval`, `read <<<`, `printf -v`, `declare -n`; and
(issue 25) jobs over several nodes: srun over 2 nodes × 1 and × 4 tasks, torchrun over 2 nodes under
Score-P, mpirun over 2 hosts, Lightning's `num_nodes`, a base folder set through a shell variable the
batch script does not export (`BASE=/scratch/...; export SCOREP_EXPERIMENT_DIRECTORY=$BASE; srun
./task.sh`), and submitit (`update_parameters(nodes=args.nodes, tasks_per_node=num_gpus_per_node)` with
`python -m scorep` around the launcher; `SlurmExecutor` submitting a `CommandFunction` that runs a task script);
and (issue 24, a second round) `srun ... bash -c "... \\$SLURM_PROCID ..."` with a multi-line double-quoted string,
`set -euo pipefail` + `trap ... EXIT` + `${VAR:?}` + `mkdir -p "$DIR" && cd "$_"`, `exec > >(tee log)` with
functions of `local` variables and torchrun's options in an array, `source env.sh` of `: "${X:=default}"`,
`srun --exact ... &` per sweep value then `wait "${pids[@]}"`, `conda activate` with `python3 -u -m scorep`,
`if [[ -n ${SLURM_JOB_ID:-} ]]` choosing `"${LAUNCH[@]}"`, and `while getopts` over the script's arguments.

The broken variant raises what is wrong, with evidence on the line that set the value; the clean
one raises nothing above pass in the job layers; `fix --apply --unsafe` leaves the broken one
clean (each applied remedy verified) or the remedy says why it cannot; `undo` restores the bytes.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from jobfix_util import failing, fix_apply_unsafe, messages
from jobfolder_util import job_of, where
from remedy_util import snapshot

from doctor.cli import main

HELDOUT = Path(__file__).resolve().parent / "fixtures" / "heldout"

# folder -> {check: evidence (file, line) that must be among its findings}
EXPECTED: dict[str, dict[str, set[tuple[str, int]]]] = {
    "titan_run_train": {"LNC001": {("run_train.sh", 27)}},
    "srun_procid": {"SCP006": {("launch_rank.sh", 6), ("launch_rank.sh", 7)}},
    "mpirun_wrapper": {"SCP005": {("scorep_wrapper.sh", 11)}, "SCP006": {("scorep_wrapper.sh", 10)}},
    "array_configs": {"SCP007": {("sweep.sbatch", 15)}},
    # the `trace` arm's `--` never runs: MODE=profile is set on line 4
    "case_mode": {"SCP003": {("job.sh", 23)}},
    "function_launch": {"SCP002": {("submit.sh", 22), ("env.sh", 1)}, "SCP006": {("submit.sh", 9)}},
    "accelerate_launch": {"LNC001": {("launch.sh", 16)}},
    "nanogpt": {"LNC001": {("run.sh", 15)}},
    "deepspeed_gpus": {"LNC001": {("ds_run.sh", 16)}},
    "perrank_cfor": {"SCR002": {("train.py", 22)}},
    # a plain HF Trainer job: PyTorch >= 2.4 warns when the group outlives the process (SCR002 warn)
    "hf_trainer_args": {"TRN001": {("finetune.sh", 12)}, "SCR002": {("run_glue.py", 18)}},
    # 2 nodes × 4 workers: 8 CUPTI users; the batch shell's warm-up reaches the first node only
    "multinode_rdzv": {"SCP006": {("node_wrapper.sh", 2)}, "SCP004": {("node_wrapper.sh", 3)},
                       "LNC002": {("multinode.sbatch", 18)}},
    "submit_dir_memory": {"SCP003": {("job.slurm", 9)}, "LNC002": {("job.slurm", 10), ("job.slurm", 12)}},
    # PROFILE=1 above: the `then` branch sets LAUNCH, the `else` one does not run
    "if_profile_switch": {"SCP002": {("job.sh", 24), ("job.sh", 10)}, "SCP005": {("job.sh", 10)}},
    "srun_export": {"SCP003": {("job.sh", 16)}},  # srun --export=ALL,SCOREP_TOTAL_MEMORY=4G
    "mpirun_direct": {"SCP006": {("job.sh", 16)}},
    # the per-task script the job writes with `cat > task.sh <<'EOF'` and runs with srun
    "heredoc_wrapper": {"SCP005": {("job.sh", 22)}},
    "dotenv_export": {"SCP003": {("scorep.env", 3)}},  # export $(grep -v '^#' scorep.env | xargs)
    # `while [ $rank -lt $ngpus ]; do ... & rank=$((rank+1)); done`: per rank, as the `for` loop
    "perrank_while": {"SCP006": {("run_ranks.sh", 20)}},
    # `module use "$SLURM_SUBMIT_DIR/modulefiles"; module load scorep-job`: Lmod's setenv("...", "8G")
    "modulefile_lua": {"SCP003": {("modulefiles/scorep-job/1.0.lua", 6)}},
    # MODULEPATH=$PWD/modules:...; `ml profiling` loads the highest version, a Tcl `setenv`
    "modulefile_tcl": {"SCP003": {("modules/profiling/2.1", 10)}},
    # `srun $SRUN_ARGS bash -c "$CMD"`: the options known at run time, the command string read as a command
    "srun_args_bash_c": {"SCP005": {("job.sbatch", 16)}},
    # scripts/train.sbatch runs `python -m scorep --cuda train.py --config ../resources/ddp.json`: from scripts/
    "subdir_relative": {"SCR002": {("scripts/train.py", 20)}},
    # container wrappers: the command inside is the launch
    "container_shifter": {"SCP005": {("job.sh", 15)}},  # srun shifter --image=... --module=gpu bash -c '...'
    "container_singularity": {"SCP002": {("run.slurm", 13), ("run.slurm", 8)}},  # singularity exec --nv IMG
    "container_apptainer": {"SCP003": {("job.sbatch", 10)}},  # apptainer exec --env SCOREP_TOTAL_MEMORY=8G
    # `load_best_model_at_end: bool = field(default=True)` in a TrainingArguments subclass, eval "no" by default
    "trainer_dataclass_default": {"TRN001": {("run_clm.py", 17), ("train.sh", 7)}},
    # the warm-up loop's `python3 -c '...; sys.exit(0 if torch.cuda.is_available() else 1)'` never warms up
    "readiness_python_c": {"SCR004": {("job.sbatch", 13)}, "LNC002": {("job.sbatch", 13), ("job.sbatch", 21)}},
    # `--nopython` is the bindings' `--noinstrumenter`: the default memory is enough (no SCP009)
    "nopython_flag": {"SCP005": {("run.sh", 15)}},
    # values set where the reader cannot see them: unknown from there on, never the older 3500M
    "eval_memory": {"SCP003": {("job.sh", 9)}, "SCP009": {("job.sh", 9)}},  # eval "export ...=$(cat ...)"
    "read_memory": {"SCP003": {("job.sh", 9)}, "SCP009": {("job.sh", 9)}},  # read -r SCOREP_TOTAL_MEMORY <<< ...
    "printf_v_memory": {"SCP003": {("job.sh", 9)}},  # printf -v SCOREP_TOTAL_MEMORY '%dG' 8: 8G
    "nameref_memory": {"SCP003": {("job.sh", 10)}},  # declare -n target=$1; target=$2: the caller's 8G
    # several nodes: the ranks counted over every node, the warm-up wanted on each
    "srun_two_nodes_one_task": {"SCP006": {("resnet.sbatch", 15), ("resnet.sbatch", 13)},
                                "LNC002": {("resnet.sbatch", 15)}},
    "srun_two_nodes_four_tasks": {"SCP006": {("job.slurm", 20), ("job.slurm", 18)}, "SCP004": {("job.slurm", 20)},
                                  "LNC002": {("job.slurm", 20)}},
    "torchrun_two_nodes_scorep": {"LNC001": {("llm.sbatch", 17)}, "SCP006": {("llm.sbatch", 15)},
                                  "SCP004": {("llm.sbatch", 17)}, "LNC002": {("llm.sbatch", 17)}},
    "mpirun_two_hosts": {"SCP006": {("run_bert.sh", 7), ("run_bert.sh", 5)}, "SCP004": {("run_bert.sh", 7)},
                         "LNC002": {("run_bert.sh", 7)}},
    "lightning_num_nodes": {"SCP006": {("train.sbatch", 14), ("train.sbatch", 11)},
                            "SCP004": {("train.sbatch", 14)}, "LNC002": {("train.sbatch", 14)}},
    # `BASE=/scratch/...; export SCOREP_EXPERIMENT_DIRECTORY=$BASE`, BASE not exported; `srun ./task.sh`
    "srun_task_base_var": {"SCP006": {("task.sh", 6), ("vit.sbatch", 15)}, "LNC002": {("task.sh", 6)}},
    # `python -m scorep --cuda launch.py --nodes 8 --ngpus 4`: launch.py's executor.submit(Task(args)) on line 49
    "submitit_eight_nodes": {"LNC001": {("run.sh", 10), ("launch.py", 49)}, "LNC002": {("run.sh", 10)}},
    # submitit's SlurmExecutor(nodes=NODES, ntasks_per_node=...) submits CommandFunction(["bash", "dino_task.sh"])
    "submitit_command_task": {"SCP006": {("dino_task.sh", 6), ("submit.sh", 6)}, "SCP004": {("dino_task.sh", 6)},
                              "LNC002": {("dino_task.sh", 6)}},
    # (issue 24, second round) `srun ... bash -c "... \\$SLURM_PROCID ..."`: the batch shell expands $SLURM_JOB_ID once
    "escaped_bash_c": {"SCP006": {("job.sbatch", 12), ("job.sbatch", 13)}},
    # `set -euo pipefail`, `trap ... EXIT`, `${VAR:?}`, `mkdir -p "$DIR" && cd "$_"`
    "strict_scratch_cd": {"SCP003": {("run.sbatch", 11)}},
    # `exec > >(tee -a log)`, functions with `local`, torchrun's options in an array `"${args[@]}"`
    "tee_function_array": {"LNC001": {("launch.sh", 19)}},
    # `source env.sh` of `: "${SCOREP_CUDA_ENABLE:=...}"` defaults, then a `${VAR:?}` guard
    "source_env_defaults": {"SCP007": {("env.sh", 3)}},
    # one `srun --exact ... &` per sweep value, then `wait "${pids[@]}"`: both write the same folder
    "srun_background_wait": {"SCP006": {("job.sh", 6), ("job.sh", 11)}},
    # `conda activate` after `eval "$(conda shell.bash hook)"`, `python3 -u -m scorep` in a multi-line `bash -c`
    "conda_activate_cuda": {"SCP002": {("job.sh", 11), ("job.sh", 20)}},
    # `if [[ -n ${SLURM_JOB_ID:-} ]]; then LAUNCH=(srun ...); else LAUNCH=(mpirun ...); fi; "${LAUNCH[@]}" python ...`
    "slurm_or_mpirun": {"SCP005": {("run.sh", 14)}, "SCP006": {("run.sh", 14)}},
    # `while getopts ":m:e:ch" opt; do case ... m) MEM=$OPTARG ;; ...`: `sbatch job.sh` passes none, MEM=5G stands
    "getopts_memory": {"SCP003": {("job.sh", 20)}},
}

# folder -> {check: what its message must say of the count (nodes × tasks per node)}
COUNTS: dict[str, dict[str, str]] = {
    "srun_two_nodes_one_task": {"SCP006": "srun starts 2 tasks (2 nodes × 1 task, from #SBATCH)"},
    "srun_two_nodes_four_tasks": {"SCP006": "srun starts 8 tasks (2 nodes × 4 tasks, from #SBATCH)",
                                  "SCP004": "8 CUDA-recording ranks"},
    "torchrun_two_nodes_scorep": {"LNC001": "not the 8 workers it spawns, 4 on each of 2 nodes",
                                  "SCP006": "srun starts 2 tasks (2 nodes × 1 task", "SCP004": "8 CUDA-recording ranks"},
    "mpirun_two_hosts": {"SCP006": "mpirun starts 8 tasks (2 nodes × 4 tasks, from mpirun hosts gpu01,gpu02)",
                         "SCP004": "8 CUDA-recording ranks"},
    "lightning_num_nodes": {"SCP006": "srun starts 8 tasks (2 nodes × 4 tasks", "SCP004": "8 CUDA-recording ranks"},
    "submitit_command_task": {"SCP006": "srun starts 32 tasks (8 nodes × 4 tasks, from submitit's srun, "
                                        "update_parameters(nodes=NODES) at submit_dino.py:16 (NODES = 8))",
                              "SCP004": "32 CUDA-recording ranks (8 nodes × 4 tasks)"},
    "submitit_eight_nodes": {"LNC001": "measures the submitting process only, not the 32 tasks it starts, 4 on each "
                                       "of 8 nodes"},
    "srun_task_base_var": {"SCP006": "every rank writes SCOREP_EXPERIMENT_DIRECTORY=$BASE "
                                     "(/scratch/$USER/scorep/vit_${SLURM_JOB_ID}): srun starts 8 tasks (2 nodes × 4 tasks"},
    "multinode_rdzv": {"SCP006": "runs it in each of 4 workers on each of 2 nodes (8 in all)",
                       "SCP004": "8 CUDA-recording ranks",
                       "LNC002": "the CUDA warm-up runs on the first node (the batch shell) only, the instrumented "
                                 "launch on 2 nodes"},
}

NODE_WARMUP = 'srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 bash -c \'\n'
MKDIR_PREFIX = "bash -c 'mkdir -p \"$SCOREP_EXPERIMENT_DIRECTORY\" && SCOREP_EXPERIMENT_DIRECTORY=$SCOREP_EXPERIMENT_DIRECTORY/"

MPI_TASK_PREFIX = "bash -c 'SCOREP_EXPERIMENT_DIRECTORY=scorep_rank_${OMPI_COMM_WORLD_RANK:-${PMI_RANK}} exec \"$@\"' bash "

# folder -> text the fixed folder must hold (each edit where the value is set, and only there)
AFTER: dict[str, list[tuple[str, str]]] = {
    # the wrapper runs once per task: its own export names each rank's folder, after its RANK
    "mpirun_wrapper": [("scorep_wrapper.sh", 'fi\nexport SCOREP_EXPERIMENT_DIRECTORY=scorep_rank_${RANK}\n'
                                             'python -m scorep --cuda "$@"\n')],
    "case_mode": [("job.sh", 'srun python -m scorep --cuda -- train.py --steps "$STEPS"\n'),  # not run: untouched
                  ("job.sh", "export SCOREP_TOTAL_MEMORY=3500M\n        srun")],
    "array_configs": [("sweep.sbatch", "export SCOREP_CUDA_ENABLE=kernel,memcpy,idle\n")],
    "hf_trainer_args": [("finetune.sh", 'SAVE_ARGS="--save_strategy steps --save_steps 500 '
                                        '--load_best_model_at_end False"\n')],
    # the job script's own arguments go along after `--`; the shell's own `overrides` with the call
    "nanogpt": [("run.sh", '\nbash ./run_ranks.sh -- "$@"\n'),
                ("run_ranks.sh", 'python -m scorep --cuda train.py config/train_shakespeare_char.py --compile=False "$@" &')],
    "titan_run_train": [("run_train.sh", 'overrides="$overrides" bash ./run_ranks.sh\n'),
                        ("run_ranks.sh", "python -m scorep --cuda -m torchtitan.train \\\n"),
                        ("run_ranks.sh", "debug_model.toml $overrides &")],
    "accelerate_launch": [("launch.sh", "\nACCELERATE_MIXED_PRECISION=bf16 bash ./run_ranks.sh\n"),
                          ("run_ranks.sh", "python -m scorep --cuda train_accel.py --epochs 2 &")],
    "heredoc_wrapper": [("job.sh", "exec python -m scorep --cuda train.py --epochs 1\nEOF\n")],
    "dotenv_export": [("scorep.env", "SCOREP_TOTAL_MEMORY=3500M\n")],
    "deepspeed_gpus": [("run_ranks.sh", "python -m scorep --cuda train_ds.py \\\n                --local_rank=$rank")],
    "submit_dir_memory": [("job.slurm", "export SCOREP_TOTAL_MEMORY=3500M\n")],
    "if_profile_switch": [("job.sh", 'LAUNCH="python -m scorep --cuda --mpp=none"\n'), ("job.sh", "LAUNCH=python\n")],
    "srun_export": [("job.sh", "srun --export=ALL,SCOREP_ENABLE_TRACING=true,SCOREP_TOTAL_MEMORY=3500M \\\n")],
    # mpirun on the job script's own line: the batch shell would expand a per-rank value once, so
    # each task's own shell names its folder
    "mpirun_direct": [("job.sh", "-x MASTER_PORT=29555 " + MPI_TASK_PREFIX + "python -m scorep --cuda train_mpi.py\n")],
    "perrank_while": [("run_ranks.sh", "SCOREP_EXPERIMENT_DIRECTORY=scorep_rank_${rank} \\\n")],
    "modulefile_lua": [("modulefiles/scorep-job/1.0.lua", 'setenv("SCOREP_TOTAL_MEMORY", "3500M")\n')],
    "modulefile_tcl": [("modules/profiling/2.1", "setenv SCOREP_TOTAL_MEMORY 3500M\n"),
                       ("modules/profiling/1.0", "setenv SCOREP_TOTAL_MEMORY 2G\n")],  # not loaded: untouched
    "srun_args_bash_c": [("job.sbatch", "python -m scorep --cuda train.py --epochs 1'\n")],
    "container_shifter": [("job.sh", "exec python -m scorep --cuda train.py --epochs 1'\n")],
    "container_singularity": [("run.slurm", "exec python -m scorep --cuda --thread=pthread train.py --epochs 1'\n")],
    "container_apptainer": [("job.sbatch", "--env SCOREP_TOTAL_MEMORY=3500M --bind /scratch pytorch.sif")],
    "trainer_dataclass_default": [("run_clm.py", "load_best_model_at_end: bool = field(default=False, metadata=")],
    "readiness_python_c": [("job.sbatch", "if python3 -c 'import sys, torch; torch.zeros(1).cuda()'; then\n")],
    "nopython_flag": [("run.sh", "python -m scorep --nopython --cuda train.py --epochs 1 &\n")],
    "nameref_memory": [("job.sh", "set_size SCOREP_TOTAL_MEMORY 3500M\n")],
    # each rank's folder under the job's own base path (never the submit folder), made first; the
    # warm-up once on every node, before the instrumented step
    "srun_two_nodes_one_task": [("resnet.sbatch", "\nsrun " + MKDIR_PREFIX + "scorep_rank_${SLURM_PROCID} exec "
                                 "\"$@\"' bash python -m scorep --cuda train.py --epochs 2\n"),
                                ("resnet.sbatch", "resnet_$SLURM_JOB_ID\n\n# gpu-doctor: cuda-warmup: "),
                                ("resnet.sbatch", NODE_WARMUP),
                                ("resnet.sbatch", "never became ready on $(hostname)")],
    "srun_two_nodes_four_tasks": [("job.slurm", "srun --cpu-bind=cores " + MKDIR_PREFIX + "scorep_rank_${SLURM_PROCID}"),
                                  ("job.slurm", NODE_WARMUP)],
    # srun starts one torchrun agent per node (one task per node in the allocation): the torchrun form
    "torchrun_two_nodes_scorep": [
        ("llm.sbatch", "srun $(which torchrun) --nnodes=$SLURM_NNODES --nproc_per_node=4 \\\n"),
        ("llm.sbatch", "--no-python ./scorep_rank.sh train.py --epochs 1\n"),
        ("llm.sbatch", NODE_WARMUP),
        ("scorep_rank.sh", "# Torchrun form: the allocation gives one task per node"),
        ("scorep_rank.sh", 'mkdir -p "$SCOREP_EXPERIMENT_DIRECTORY"'),
        ("scorep_rank.sh", "export SCOREP_EXPERIMENT_DIRECTORY=$SCOREP_EXPERIMENT_DIRECTORY/scorep_rank_${RANK}\n"
                           'exec python -m scorep --cuda "$@"\n')],
    # over its own hosts: the warm-up is one mpirun process per host
    "mpirun_two_hosts": [("run_bert.sh", "mpirun -np 2 -H gpu01,gpu02 --map-by ppr:1:node -x PATH bash -c '\n"),
                         ("run_bert.sh", "\nmpirun -x SCOREP_CUDA_BUFFER -np 8 -H gpu01:4,gpu02:4 "),
                         ("run_bert.sh", MKDIR_PREFIX + "scorep_rank_${OMPI_COMM_WORLD_RANK:-${PMI_RANK}} exec")],
    "lightning_num_nodes": [("train.sbatch", "srun " + MKDIR_PREFIX + "scorep_rank_${SLURM_PROCID}")],
    # the task has the exported value, not BASE: each rank's folder under it, made there first
    "srun_task_base_var": [("task.sh", 'export WORLD_SIZE=$SLURM_NTASKS\nmkdir -p "$SCOREP_EXPERIMENT_DIRECTORY"\n'
                                       "SCOREP_EXPERIMENT_DIRECTORY=${SCOREP_EXPERIMENT_DIRECTORY}/scorep_rank_${RANK} "
                                       "exec python -m scorep --cuda train_vit.py --epochs 1\n"),
                           ("vit.sbatch", "BASE=/scratch/$USER/scorep/vit_${SLURM_JOB_ID}\n"
                                          "export SCOREP_EXPERIMENT_DIRECTORY=$BASE\n"),
                           ("vit.sbatch", NODE_WARMUP)],
    # each task's folder under the exported base, named in the script every task runs; the buffer next to
    # the job's other Score-P settings, which reach every task
    "submitit_command_task": [("dino_task.sh", 'mkdir -p "$SCOREP_EXPERIMENT_DIRECTORY"\n'),
                              ("dino_task.sh", "\nSCOREP_EXPERIMENT_DIRECTORY=${SCOREP_EXPERIMENT_DIRECTORY}/scorep_rank_"
                                               '${RANK} exec python -m scorep --cuda dino_train.py "$@"\n'),
                              ("dino_task.sh", "cuda_ready=0\n"),
                              ("submit.sh", "dino_vits16\nexport SCOREP_CUDA_BUFFER=256M\npython submit_dino.py")],
    # inside the double-quoted string each task's own shell expands it: written `\\${RANK}`
    "escaped_bash_c": [("job.sbatch", "    SCOREP_EXPERIMENT_DIRECTORY=scorep_rank_\\${RANK} python3 -u -m scorep train.py "
                                      '--epochs 1"\n')],
    "strict_scratch_cd": [("run.sbatch", "export SCOREP_TOTAL_MEMORY=3500M\n")],
    "source_env_defaults": [("env.sh", ': "${SCOREP_CUDA_ENABLE:=kernel,memcpy,sync}"\n')],
    "srun_background_wait": [("job.sh", "    SCOREP_EXPERIMENT_DIRECTORY=scorep_rank_${lr} srun --exact")],
    "conda_activate_cuda": [("job.sh", "exec python3 -u -m scorep --cuda train.py --epochs 1'\n")],
    "getopts_memory": [("job.sh", "\nMEM=3500M\n")],
    # under sbatch bash takes the srun arm: each task's own shell names its folder; the `--` goes
    "slurm_or_mpirun": [("run.sh", '"${LAUNCH[@]}" bash -c \'SCOREP_EXPERIMENT_DIRECTORY=scorep_rank_${SLURM_PROCID} '
                                   'exec "$@"\' bash python -m scorep train.py --epochs 1\n')],
}

# folder -> {check left after the fix: the remedy that must say why it cannot}
CANNOT: dict[str, dict[str, str]] = {
    # no assignment to edit: the remedy names the line to set it on instead
    "eval_memory": {"SCP003": "scorep-total-memory", "SCP009": "scorep-total-memory"},
    "read_memory": {"SCP003": "scorep-total-memory", "SCP009": "scorep-total-memory"},
    "printf_v_memory": {"SCP003": "scorep-total-memory"},
    # the per-task launch is submitit's, in launch.py's Python: the manual steps name it
    "submitit_eight_nodes": {"LNC001": "per-rank-launch", "LNC002": "cuda-warmup"},
}


def test_every_heldout_folder_has_both_variants_and_an_expectation() -> None:
    folders = {p.name for p in HELDOUT.iterdir() if p.is_dir()}
    assert folders == set(EXPECTED) and len(folders) >= 12
    for name in folders:
        assert (HELDOUT / name / "broken").is_dir() and (HELDOUT / name / "clean").is_dir(), name


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_broken_heldout_job_raises_its_findings_at_the_line_that_set_the_value(name: str) -> None:
    found = failing(HELDOUT / name / "broken")
    assert set(found) == set(EXPECTED[name]), messages(found)
    for cid, evidence in EXPECTED[name].items():
        assert evidence <= set(where(found[cid])), (cid, where(found[cid]))


@pytest.mark.parametrize("name", sorted(COUNTS))
def test_a_multinode_heldout_finding_counts_every_node(name: str) -> None:
    found = failing(HELDOUT / name / "broken")
    for cid, words in COUNTS[name].items():
        assert any(words in o.message for o in found.get(cid, [])), (cid, messages(found))


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_clean_heldout_job_raises_nothing_above_pass(name: str) -> None:
    assert messages(failing(HELDOUT / name / "clean")) == {}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fix_leaves_the_heldout_job_clean_or_says_why_not_and_undo_restores_it(
        name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = tmp_path / name
    shutil.copytree(HELDOUT / name / "broken", job, symlinks=True)
    before = snapshot(job)
    out, verified, left = fix_apply_unsafe(job, capsys)
    assert "NOT verified" not in out and "Traceback" not in out, out
    assert all(v is True for v in verified.values()), verified
    cannot = CANNOT.get(name, {})
    assert set(left) == set(cannot), (left, out)
    for remedy in cannot.values():
        assert f"{remedy}: cannot apply here: " in out, out
    if not cannot:
        assert verified, out
    for rel, text in AFTER.get(name, []):
        assert text in (job / rel).read_text(), (rel, text)
    if verified:  # something was applied
        assert main(["undo", str(job)]) == 0
        capsys.readouterr()
    assert snapshot(job) == before


@pytest.mark.parametrize("rank_env", [{"OMPI_COMM_WORLD_RANK": "3"}, {"PMI_RANK": "3"}])
def test_the_mpi_task_prefix_names_the_folder_from_the_rank_its_own_launcher_sets(
        rank_env: dict[str, str], tmp_path: Path) -> None:
    import os
    import subprocess

    # what mpirun runs in each task (Open MPI sets OMPI_COMM_WORLD_RANK, MPICH/Hydra PMI_RANK)
    env = {k: v for k, v in os.environ.items() if k not in ("OMPI_COMM_WORLD_RANK", "PMI_RANK")} | rank_env
    proc = subprocess.run(f"{MPI_TASK_PREFIX}printenv SCOREP_EXPERIMENT_DIRECTORY", shell=True, env=env,
                          capture_output=True, text=True, timeout=30, executable="/bin/bash")
    assert proc.stdout == "scorep_rank_3\n", proc.stderr


def test_a_per_task_wrapper_that_exports_its_folder_before_its_rank_gets_the_folder_on_the_launch(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = tmp_path / "job"
    shutil.copytree(HELDOUT / "mpirun_wrapper" / "broken", job)
    wrapper = job / "scorep_wrapper.sh"
    text = wrapper.read_text().replace("export SCOREP_EXPERIMENT_DIRECTORY=scorep_mpi_run\n", "")
    wrapper.write_text(text.replace("# Which rank", "export SCOREP_EXPERIMENT_DIRECTORY=scorep_mpi_run\n# Which rank"))
    out, verified, left = fix_apply_unsafe(job, capsys)
    assert verified.get("scorep-per-rank-dirs") is True and not left, out
    fixed = wrapper.read_text()  # ${RANK} is empty where the export stands: the launch line names it
    assert "export SCOREP_EXPERIMENT_DIRECTORY=scorep_mpi_run\n" in fixed
    assert 'SCOREP_EXPERIMENT_DIRECTORY=scorep_rank_${RANK} python -m scorep --cuda "$@"\n' in fixed


def test_the_submitit_job_counts_the_nodes_its_launcher_asks_for_on_the_command_line() -> None:
    from jobfolder_util import run_check
    from test_multinode_ifname import fact

    for variant, line, launch, call in (("broken", 10, "python -m scorep --cuda launch.py", 38),
                                        ("clean", 7, "python launch.py", 25)):
        [out] = run_check("LNC004", HELDOUT / "submitit_eight_nodes" / variant,
                          {"socket_route": fact(("127.0.1.1",))}, host="gpu012")
        assert "one node" not in out.message and out.status.name == "FAIL", out.message
        said = [(e.file, e.line, e.text) for e in out.evidence]
        assert ("run.sh", line, f"{launch} --nodes 8 --ngpus 4 --epochs 1  (8 nodes × 4 tasks: "
                f"update_parameters(nodes=args.nodes) at launch.py:{call} "
                "(--nodes 8 on the command line))") in said, said


def test_a_case_arm_that_cannot_run_is_not_read_as_a_launch() -> None:
    job = job_of(HELDOUT / "case_mode" / "clean")
    launched = [c.site.line for c, _launch in job.instrumented]
    assert launched == [23]  # the `profile)` arm; `trace)` (line 19) does not run with MODE=profile
    assert "SCOREP_ENABLE_TRACING" in job.instrumented[0][0].env  # its export in that arm
    assert job.instrumented[0][0].env["SCOREP_ENABLE_TRACING"].value == "false"


def test_an_mpi_wrapper_names_each_ranks_folder_from_the_rank_it_exports() -> None:
    from doctor.jobfolder.queries import rank_spelling

    job = job_of(HELDOUT / "mpirun_wrapper" / "broken")
    (cmd, _launch), = job.instrumented
    assert [w.name for w in cmd.wrappers] == ["mpirun"] and cmd.per_task
    assert rank_spelling(cmd) == "${RANK}"
    assert cmd.env["RANK"].varies


def test_the_per_rank_script_hands_the_job_scripts_own_arguments_to_every_rank(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import os
    import subprocess
    import sys

    job = tmp_path / "job"
    job.mkdir()
    (job / "run.sh").write_text('#!/bin/bash\nexport SCOREP_TOTAL_MEMORY=3500M\nSUFFIX=run$(echo 1)\n'
                                'python -m scorep --cuda $(which torchrun) --standalone --nproc_per_node=2 '
                                'show.py --tag "$SUFFIX" "$@"\n')
    (job / "show.py").write_text("import os, sys\nwith open(f\"rank{os.environ['RANK']}.txt\", 'w') as f:\n"
                                 "    f.write(' '.join(sys.argv[1:]) + ' ' + os.environ['WORLD_SIZE'])\n")
    assert main(["fix", str(job), "--apply", "--unsafe", "--only", "per-rank-launch"]) == 0
    capsys.readouterr()
    assert (job / "run.sh").read_text().endswith('SUFFIX="$SUFFIX" bash ./run_ranks.sh -- "$@"\n')
    bin_dir = tmp_path / "bin"  # `python` is the interpreter running the tests
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "GPU_DOCTOR_UNINSTRUMENTED": "1",
           "GPU_DOCTOR_WARMUP": "0"}
    proc = subprocess.run(["bash", "run.sh", "--lr", "0.1"], cwd=job, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert [(job / f"rank{r}.txt").read_text() for r in (0, 1)] == ["--tag run1 --lr 0.1 2"] * 2


def test_the_job_scripts_own_arguments_are_named_in_the_process_tree() -> None:
    import json

    import jsonschema

    from doctor.jobfolder.processes import job_json, launch_lines

    job = job_of(HELDOUT / "multinode_rdzv" / "broken")
    schema = json.loads((HELDOUT.parents[2] / "doctor" / "schemas" / "gate.schema.json").read_text())
    tree = job_json(job)
    jsonschema.validate(tree["processes"], {"type": "array", "items": {"$ref": "#/$defs/process"},
                                            "$defs": schema["$defs"]})
    (script,) = tree["processes"]
    torchrun = script["children"][-1]
    (worker,) = torchrun["children"]
    for node in (torchrun, worker):  # the wrapper's "$@" came from the job script's, on line 25
        args = [p for p in node["placeholders"] if p["text"] == "$@"]
        assert args and args[0]["file"] == "multinode.sbatch" and args[0]["line"] == 25, node["placeholders"]
        assert "the arguments multinode.sbatch is started with" in args[0]["means"]
    assert not [p for p in worker["placeholders"] if p["text"] == "train.py"]
    assert any(line.strip().startswith("$head_node_ip: known only when the job runs") for line in launch_lines(job))


def test_a_worker_count_known_only_when_the_job_runs_is_said_so(tmp_path: Path) -> None:
    from jobfolder_util import run_check, write_job

    write_job(tmp_path, {"job.sh": """
        #!/bin/bash
        export SCOREP_TOTAL_MEMORY=3500M
        NGPUS=$(nvidia-smi -L | wc -l)
        python -m scorep --cuda -m torch.distributed.launch --use_env --nproc_per_node=$NGPUS train.py
        """, "train.py": "import torch\n"})
    (out,) = run_check("LNC001", tmp_path)
    assert out.message.endswith("not the workers it spawns ($NGPUS of them, known only when the job runs)")
