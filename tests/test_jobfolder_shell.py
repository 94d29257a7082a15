"""Job scripts read with tree-sitter-bash: commands, their environment, loops, wrappers, what Python they start."""

from __future__ import annotations

from pathlib import Path

import pytest
from jobfolder_util import job_of, write_job

from doctor.jobfolder.expand import expand_text
from doctor.jobfolder.model import Command, Job


def only_launch(job: Job) -> Command:
    cmds = [c for c in job.commands if c.launch is not None]
    assert len(cmds) == 1, [c.argv for c in cmds]
    return cmds[0]


def test_exported_and_inline_variables_reach_the_command_with_their_lines(tmp_path: Path) -> None:
    write_job(tmp_path, {"run.sh": """
        #!/bin/bash
        export SCOREP_TOTAL_MEMORY=4G
        SCOREP_CUDA_ENABLE=kernel   # not exported: python never sees it
        NOT_EXPORTED_TOO=1
        SCOREP_EXPERIMENT_DIRECTORY=exp env SCOREP_CUDA_BUFFER=8M python3 train.py
        """, "train.py": "print(1)\n"})
    cmd = only_launch(job_of(tmp_path))
    assert cmd.env["SCOREP_TOTAL_MEMORY"].value == "4G"
    assert cmd.env["SCOREP_TOTAL_MEMORY"].site is not None and cmd.env["SCOREP_TOTAL_MEMORY"].site.line == 2
    assert "SCOREP_CUDA_ENABLE" not in cmd.env and "NOT_EXPORTED_TOO" not in cmd.env
    assert cmd.env["SCOREP_EXPERIMENT_DIRECTORY"].value == "exp"
    assert cmd.env["SCOREP_CUDA_BUFFER"].value == "8M"
    assert cmd.site.line == 5


def test_set_a_unset_and_export_of_an_existing_variable(tmp_path: Path) -> None:
    write_job(tmp_path, {"run.sh": """
        A=1
        export A
        set -a
        B=2
        set +a
        C=3
        export D=4
        unset D
        python x.py
        """})
    env = only_launch(job_of(tmp_path)).env
    assert env["A"].value == "1" and env["B"].value == "2"
    assert "C" not in env and "D" not in env


def test_sourced_file_inside_the_folder_sets_the_environment(tmp_path: Path) -> None:
    write_job(tmp_path, {"job.sbatch": """
        #!/bin/bash
        #SBATCH --gres=gpu:4
        source ./scorep_env.sh
        . cfg/more.sh
        python -m scorep --cuda train.py
        """, "scorep_env.sh": "export SCOREP_TOTAL_MEMORY=3500M\n",
        "cfg/more.sh": "export SCOREP_CUDA_ENABLE=kernel\n", "train.py": "pass\n"})
    job = job_of(tmp_path)
    cmd = only_launch(job)
    assert cmd.env["SCOREP_TOTAL_MEMORY"].site.file.endswith("scorep_env.sh")  # type: ignore[union-attr]
    assert cmd.env["SCOREP_CUDA_ENABLE"].value == "kernel"
    # a sourced file is not a job of its own
    assert len(job.commands) == 1


def test_source_outside_the_folder_is_noted_not_read(tmp_path: Path) -> None:
    outside = tmp_path / "outside.sh"
    outside.write_text("export SECRET=1\n")
    write_job(tmp_path / "job", {"run.sh": f"source {outside}\npython t.py\n"})
    job = job_of(tmp_path / "job")
    assert "SECRET" not in only_launch(job).env
    assert any("outside the job folder" in n.text for n in job.notes)


@pytest.mark.parametrize("loop,count", [
    ("for r in 0 1 2 3; do", 4),
    ("for r in {0..7}; do", 8),
    ("for r in $(seq 0 3); do", 4),
    ("for r in $(seq 0 $((N - 1))); do", 4),
    ("for r in `seq 1 $N`; do", 4),
    ("for ((r=0; r<N; r++)); do", 4),
    ("for ((r = 0; r <= 7; ++r)); do", 8),
    ("for r in $(cat hosts); do", None),
])
def test_rank_loops_and_their_iteration_counts(tmp_path: Path, loop: str, count: int | None) -> None:
    write_job(tmp_path, {"run.sh": f"""
        N=4
        {loop}
            RANK=$r SCOREP_EXPERIMENT_DIRECTORY=scorep_rank_$r python -m scorep --cuda train.py &
        done
        wait
        """})
    cmd = only_launch(job_of(tmp_path))
    assert cmd.loop is not None and cmd.loop.count == count
    assert cmd.background
    assert cmd.env["SCOREP_EXPERIMENT_DIRECTORY"].varies
    assert cmd.env["RANK"].varies


def test_arithmetic_and_test_brackets_parse(tmp_path: Path) -> None:
    write_job(tmp_path, {"run.sh": """
        N=$((2 * 4))
        LAST=$((N - 1))
        if [[ -n "${SLURM_JOB_ID:-}" && $N =~ ^[0-9]+$ ]]; then
            echo "in slurm"
        fi
        (( N > 2 )) && echo many
        python train.py --ranks "$N" --last $LAST
        """})
    cmd = only_launch(job_of(tmp_path))
    assert cmd.launch is not None and cmd.launch.args == ("--ranks", "8", "--last", "7")


def test_word_splitting_and_arrays_of_trainer_flags(tmp_path: Path) -> None:
    write_job(tmp_path, {"run.sh": """
        FLAGS="--fp16 --evaluation_strategy no"
        ARGS=(--load_best_model_at_end True "--run_name" "a b")
        ARGS+=(--seed 1)
        python train.py $FLAGS "${ARGS[@]}"
        """})
    cmd = only_launch(job_of(tmp_path))
    assert cmd.launch is not None
    assert cmd.launch.args == ("--fp16", "--evaluation_strategy", "no", "--load_best_model_at_end", "True",
                               "--run_name", "a b", "--seed", "1")


@pytest.mark.parametrize("line,interp,flags,program", [
    ("python -m scorep train.py", "python", (), "train.py"),
    ("python3 -u -m scorep --cuda --thread=pthread train.py", "python3", ("--cuda", "--thread=pthread"), "train.py"),
    ("/opt/venv/bin/python3.11 -m scorep --keep-files --verbose --mpp=mpi --cuda train.py", "/opt/venv/bin/python3.11",
     ("--keep-files", "--verbose", "--mpp=mpi", "--cuda"), "train.py"),
    ("python -m scorep --nopython --instrumenter-type=cProfile --instrumenter-file=f.py --mpi --cuda train.py",
     "python", ("--nopython", "--instrumenter-type=cProfile", "--instrumenter-file=f.py", "--mpi", "--cuda"),
     "train.py"),
    ("python -X dev -m scorep --noinstrumenter -- train.py", "python", ("--noinstrumenter",), "train.py"),
])
def test_python_m_scorep_spellings(tmp_path: Path, line: str, interp: str, flags: tuple[str, ...],
                                   program: str) -> None:
    write_job(tmp_path, {"run.sh": line + " --lr 1\n", "train.py": "pass\n"})
    launch = only_launch(job_of(tmp_path)).launch
    assert launch is not None and launch.scorep is not None
    assert launch.interpreter == interp
    assert set(launch.scorep.flags) == set(flags)
    assert launch.target == program and launch.training_args == ("--lr", "1")
    assert launch.scorep.dashdash == ("--" in line.split())


@pytest.mark.parametrize("line,kind,nproc", [
    ("python -m scorep --cuda $(which torchrun) --nproc_per_node=4 train.py --x 1", "torchrun", 4),
    ("python -m scorep --cuda /opt/venv/bin/torchrun --nproc-per-node 8 --standalone train.py --x 1", "torchrun", 8),
    ("torchrun --nnodes 1 --nproc_per_node=2 train.py --x 1", "torchrun", 2),
    ("python -m torch.distributed.run --nproc_per_node 4 train.py --x 1", "torch.distributed.run", 4),
    ("python3 -m torch.distributed.launch --nproc_per_node=4 --use_env train.py --x 1", "torch.distributed.launch", 4),
    ("accelerate launch --multi_gpu --num_processes 4 --mixed_precision fp16 train.py --x 1", "accelerate", 4),
    ("deepspeed --num_gpus 2 train.py --x 1", "deepspeed", 2),
    ("python -m scorep --cuda -m torch.distributed.run --nproc_per_node=4 train.py --x 1",
     "torch.distributed.run", 4),
])
def test_spawner_spellings_find_the_training_script(tmp_path: Path, line: str, kind: str, nproc: int) -> None:
    write_job(tmp_path, {"run.sh": line + "\n", "train.py": "pass\n"})
    launch = only_launch(job_of(tmp_path)).launch
    assert launch is not None and launch.spawner is not None
    assert launch.spawner.kind == kind and launch.spawner.nproc == nproc
    assert launch.training_script == str(tmp_path / "train.py")
    assert launch.training_args == ("--x", "1")


@pytest.mark.parametrize("code", [
    "from torch.distributed.run import main\nmain()\n",
    "import torch.distributed.run as tdr\nif __name__ == '__main__':\n    tdr.main()\n",
    "import sys\nfrom torch.distributed.run import main as torchrun\nsys.exit(torchrun())\n",
    "import runpy\nrunpy.run_module('torch.distributed.run', run_name='__main__')\n",
    "from torch.distributed.launch import main\nmain()\n",
])
def test_wrapper_script_that_calls_torchrun_main_is_a_spawner(tmp_path: Path, code: str) -> None:
    write_job(tmp_path, {"run.sh": "python -m scorep --cuda launch_ddp.py --nproc_per_node 2 train.py --a b\n",
                         "launch_ddp.py": code, "train.py": "pass\n"})
    job = job_of(tmp_path)
    launch = only_launch(job).launch
    assert launch is not None and launch.spawner is not None and launch.spawner.kind == "wrapper-script"
    assert launch.training_script == str(tmp_path / "train.py") and launch.training_args == ("--a", "b")
    assert [s.role for s in job.scripts if s.path.endswith("launch_ddp.py")] == ["launcher"]


def test_srun_wrappers_tasks_and_bash_c_per_task_shell(tmp_path: Path) -> None:
    write_job(tmp_path, {"job.sbatch": """
        #!/bin/bash
        #SBATCH --ntasks-per-node=4
        #SBATCH -x node[01-03],gpu7
        srun -n 4 --cpu-bind=cores timeout 3600 bash -c 'SCOREP_EXPERIMENT_DIRECTORY=scorep_rank_$SLURM_PROCID exec python -m scorep --cuda train.py'
        srun --ntasks=2 env SCOREP_EXPERIMENT_DIRECTORY=scorep_rank_$SLURM_PROCID python -m scorep --cuda train.py
        """, "train.py": "pass\n"})
    job = job_of(tmp_path)
    per_task, outer = [c for c in job.commands if c.launch is not None]
    assert [w.name for w in per_task.wrappers] == ["srun", "timeout", "exec"]
    assert per_task.per_task and per_task.env["SCOREP_EXPERIMENT_DIRECTORY"].varies
    assert per_task.tasks == 4
    # expanded once by the batch shell: the same folder for every task
    assert not outer.env["SCOREP_EXPERIMENT_DIRECTORY"].varies and outer.tasks == 2
    opts = {o.name: o.value for f in job.shell_files for o in f.sbatch}
    assert opts["exclude"] == "node[01-03],gpu7" and opts["ntasks-per-node"] == "4"


def test_functions_run_where_they_are_called_and_child_scripts_are_walked(tmp_path: Path) -> None:
    write_job(tmp_path, {"job.sbatch": """
        #!/bin/bash
        warmup() {
            python -c "import torch; torch.zeros(1).cuda()"
        }
        export SCOREP_TOTAL_MEMORY=1G
        warmup
        bash ./launch_ranks.sh 4
        """, "launch_ranks.sh": """
        for r in $(seq 0 3); do
            RANK=$r python -m scorep --cuda train.py &
        done
        wait
        """, "train.py": "pass\n"})
    job = job_of(tmp_path)
    launches = [c for c in job.commands if c.launch is not None]
    assert [c.launch.kind for c in launches if c.launch] == ["code", "script"]
    warm, ranked = launches
    assert warm.order < ranked.order and warm.flow == ranked.flow
    assert ranked.site.file.endswith("launch_ranks.sh") and ranked.env["SCOREP_TOTAL_MEMORY"].value == "1G"
    assert [f for f in job.shell_files if f.path.endswith("launch_ranks.sh")][0].role == "child"


def test_heredoc_python_snippet_is_analysed_with_shell_lines(tmp_path: Path) -> None:
    write_job(tmp_path, {"run.sh": """
        #!/bin/bash
        python - <<'EOF'
        import torch
        assert torch.cuda.is_available()
        torch.zeros(1).cuda()
        EOF
        python -c "
        import torch
        torch.ones(1, device='cuda')
        "
        """})
    job = job_of(tmp_path)
    snippets = [s for s in job.scripts if s.role == "snippet"]
    assert len(snippets) == 2
    assert [site.line for site in snippets[0].cuda_asserts] == [4]
    assert sorted(site.line for s in snippets for site in s.cuda_ops) == [5, 9]


def test_case_statements_are_walked_arm_by_arm(tmp_path: Path) -> None:
    write_job(tmp_path, {"run.sh": """
        while [[ $# -gt 0 ]]; do
            case "$1" in
                --steps) STEPS=$2; shift 2 ;;
                -h|--help)
                    echo "usage: run.sh [--steps N]"
                    exit 0
                    ;;
                *) shift ;;
            esac
        done
        case "${MODE:-trace}" in
            trace) export SCOREP_TOTAL_MEMORY=2G
                   python -m scorep --cuda train.py ;;
            plain) python train.py ;;
        esac
        case "$SLURM_ARRAY_TASK_ID" in
            0|1) python -m scorep --cuda train.py --lr 1e-3 ;;
            *) python -m scorep --cuda train.py --lr 1e-4 ;;
        esac
        """})
    job = job_of(tmp_path)
    launches = [c for c in job.commands if c.launch is not None]
    # MODE is unset, so the subject is `trace`: the `plain)` arm does not run; the array task id is
    # known only when the job runs, so each of its arms may be the one
    assert [(c.site.line, c.instrumented is not None) for c in launches] == [(13, True), (17, True), (18, True)]
    assert launches[0].env["SCOREP_TOTAL_MEMORY"].site.line == 12  # type: ignore[union-attr]
    assert not [n for n in job.notes if n.kind == "unparsed"]


def test_case_arms_follow_bash_patterns_and_fallthrough(tmp_path: Path) -> None:
    write_job(tmp_path, {"run.sh": """
        MODE=profile-cuda
        case $MODE in
            trace) python -m scorep -- a.py ;;
            'profile*') python -m scorep -- b.py ;;
            profile*|debug) python -m scorep --cuda c.py ;&
            never) python -m scorep --cuda d.py ;;&
            *-cuda) python -m scorep --cuda e.py ;;
            *) python -m scorep --cuda f.py ;;
        esac
        """})
    job = job_of(tmp_path)
    # a quoted pattern is literal; `;&` runs the next arm's body, `;;&` goes on testing; `;;` stops
    assert [c.launch.target for c in job.commands if c.launch is not None] == ["c.py", "d.py", "e.py"]


def test_lines_the_parser_cannot_read_are_noted_and_the_rest_is_read(tmp_path: Path) -> None:
    write_job(tmp_path, {"run.sh": """
        export SCOREP_TOTAL_MEMORY=2G
        select opt in fast slow; do
            break
        done
        if then fi (
        python -m scorep --cuda train.py --max_steps 5
        """})
    job = job_of(tmp_path)
    cmd = only_launch(job)
    assert cmd.env["SCOREP_TOTAL_MEMORY"].value == "2G" and cmd.site.line == 6
    notes = [n for n in job.notes if n.kind == "unparsed"]
    assert [(n.line, n.text.split(" not")[0]) for n in notes] == [(5, "line 5")]


@pytest.mark.parametrize("raw,value,known", [
    ("'$HOME'", "$HOME", True), ('"$HOME/x"', "/home/u/x", True), ("${HOME:-/x}", "/home/u", True),
    ("${NOPE:-dflt}", "dflt", True), ("$NOPE", "$NOPE", False), ("$(hostname)", "$(hostname)", False),
    ("$(command -v torchrun)", "torchrun", True), ("a\\ b", "a b", True), ("~/bin", "/home/u/bin", True),
])
def test_word_expansion(raw: str, value: str, known: bool) -> None:
    from doctor.jobfolder.model import EnvVar

    env = {"HOME": EnvVar("HOME", "/home/u", "/home/u")}
    exp = expand_text(raw, env.get, home="/home/u")
    assert (exp.value, exp.known) == (value, known)


@pytest.mark.parametrize("line", [
    'HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"\npython3 "$HERE/src/train.py"',
    'cd "$(dirname "$0")"\npython3 src/train.py',
    'cd "${SLURM_SUBMIT_DIR}"\npython3 ./src/train.py',
    'python3 "$PWD/src/train.py"',
])
def test_script_folder_idioms_resolve_to_the_job_folder(tmp_path: Path, line: str) -> None:
    write_job(tmp_path, {"run.sh": line + "\n", "src/train.py": "pass\n"})
    launch = only_launch(job_of(tmp_path)).launch
    assert launch is not None and launch.training_script == str(tmp_path / "src" / "train.py")


def test_a_known_test_picks_the_branch_and_a_loop_reads_every_branch(tmp_path: Path) -> None:
    write_job(tmp_path, {"run.sh": """
        USE_SCOREP=yes
        N=2
        if [[ $USE_SCOREP == y* ]]; then
            PY="python -m scorep --cuda"
        elif [ "$N" -gt 1 ]; then
            PY="python -m scorep --nocuda"
        else
            PY=python
        fi
        $PY train.py
        for r in 0 1; do
            if [ "$r" = 0 ]; then python -m scorep --cuda a.py & else python -m scorep --cuda b.py & fi
        done
        if [ -n "$UNSET_VARIABLE" ]; then python -m scorep c.py; else python -m scorep d.py; fi
        """})
    job = job_of(tmp_path)
    assert [(c.launch.target, c.launch.scorep.cuda) for c in job.commands  # type: ignore[union-attr]
            if c.launch is not None] == [("train.py", True), ("a.py", True), ("b.py", True), ("c.py", False),
                                         ("d.py", False)]


def test_srun_export_and_mpirun_x_set_the_tasks_environment(tmp_path: Path) -> None:
    write_job(tmp_path, {"run.sh": """
        export SCOREP_TOTAL_MEMORY=3500M SCOREP_ENABLE_TRACING=true
        srun --export=ALL,SCOREP_TOTAL_MEMORY=4G python -m scorep --cuda a.py
        srun --export=SCOREP_ENABLE_TRACING,SCOREP_EXPERIMENT_DIRECTORY=x python -m scorep --cuda b.py
        mpirun -np 2 -x SCOREP_TOTAL_MEMORY=1G -genv SCOREP_EXPERIMENT_DIRECTORY mpi_run python -m scorep c.py
        """})
    a, b, c = [cmd for cmd in job_of(tmp_path).commands if cmd.launch is not None]
    memory = a.env["SCOREP_TOTAL_MEMORY"]
    assert memory.value == "4G" and memory.span is not None and (memory.span.line, memory.span.col) == (2, 39)
    assert b.env["SCOREP_EXPERIMENT_DIRECTORY"].value == "x" and "SCOREP_TOTAL_MEMORY" not in b.env
    assert b.env["SCOREP_ENABLE_TRACING"].site.line == 1  # type: ignore[union-attr]  # named: kept
    assert c.launch.target == "c.py" and c.env["SCOREP_TOTAL_MEMORY"].value == "1G"  # type: ignore[union-attr]
    assert c.env["SCOREP_EXPERIMENT_DIRECTORY"].value == "mpi_run"


def test_a_default_assignment_sets_the_variable_for_later_lines(tmp_path: Path) -> None:
    write_job(tmp_path, {"run.sh": """
        : "${NGPUS:=4}"
        : ${PORT:=29500}
        echo "${TAG:=run-$NGPUS}"
        python -m scorep --cuda $(which torchrun) --nproc_per_node=$NGPUS --master_port=$PORT train.py --tag "$TAG"
        """})
    (cmd,) = [c for c in job_of(tmp_path).commands if c.launch is not None]
    assert cmd.launch is not None and cmd.launch.spawner is not None
    assert cmd.launch.spawner.nproc == 4 and "--master_port=29500" in cmd.argv and cmd.argv[-1] == "run-4"


def test_arithmetic_defaults_and_an_export_of_a_command_output(tmp_path: Path) -> None:
    write_job(tmp_path, {"run.sh": """
        export $(curl -s http://config.local/env)
        NUM=$(( ${SLURM_GPUS_ON_NODE:-2} * ${SLURM_NNODES:-1} ))
        torchrun --nproc_per_node=$NUM train.py
        """})
    job = job_of(tmp_path)
    (cmd,) = [c for c in job.commands if c.launch is not None]
    assert cmd.launch is not None and cmd.launch.spawner is not None and cmd.launch.spawner.nproc == 2
    (note,) = [n for n in job.notes if n.kind == "unresolved"]
    assert note.line == 1 and "curl" in note.text and "only known when the job runs" in note.text


@pytest.mark.parametrize("test", ['[[ -n ${SLURM_JOB_ID:-} ]]', '[ -n "$SLURM_JOB_ID" ]', '[[ -z $SLURM_JOBID ]]'])
@pytest.mark.parametrize("sbatch, sets_it, launcher", [
    (True, False, "srun"),     # sbatch sets it in every batch job: the srun arm runs
    (False, False, None),      # a script started by hand: either arm may run
    (True, True, "mpirun"),    # the script sets it to '' itself: its own value decides
])
def test_a_test_of_what_sbatch_always_sets_is_decided_in_a_batch_job(
        tmp_path: Path, test: str, sbatch: bool, sets_it: bool, launcher: str | None) -> None:
    if "-z" in test and launcher is not None:  # `-z`: the other arm
        launcher = {"srun": "mpirun", "mpirun": "srun"}[launcher]
    write_job(tmp_path, {"run.sh": f"""
        #!/bin/bash
        {'#SBATCH --nodes=1' if sbatch else '# started by hand'}
        {'SLURM_JOB_ID=; SLURM_JOBID=' if sets_it else ':'}
        if {test}; then
            LAUNCH=(srun --ntasks-per-node=4)
        else
            LAUNCH=(mpirun -np 4)
        fi
        "${{LAUNCH[@]}}" python -m scorep train.py
        """, "train.py": "print(1)\n"})
    cmds = [c for c in job_of(tmp_path).commands if c.launch is not None]
    launchers = {c.argv[0] for c in cmds}
    if launcher is None:
        assert launchers <= {"srun", "mpirun"} and len(cmds) >= 1, [c.argv for c in cmds]
    else:
        assert launchers == {launcher}, [c.argv for c in cmds]
