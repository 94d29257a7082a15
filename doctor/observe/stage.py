"""What the sandboxed bash finds: the copy of the job folder, a PATH of recording shims and real
harmless tools, the environment of the job (`#SBATCH` gives Slurm's), and where records go."""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
from collections.abc import Mapping
from importlib import resources

from doctor.jobfolder.model import SbatchOption

SHIMMED = ("srun", "mpirun", "mpiexec", "orterun", "torchrun", "accelerate", "deepspeed", "python", "python2",
           "python3", *(f"python3.{n}" for n in range(6, 15)), "pypy", "pypy3", "singularity", "apptainer",
           "shifter", "enroot", "podman", "docker", "scontrol", "hostname", "nproc", "nvidia-smi", "sbatch",
           "squeue", "sinfo", "sacct", "scancel", "salloc", "jsrun", "aprun", "nsys", "ncu")
REAL = ("bash", "sh", "env", "cat", "echo", "printf", "true", "false", "test", "[", "expr", "seq", "xargs", "grep",
        "egrep", "fgrep", "sed", "awk", "gawk", "mawk", "cut", "tr", "head", "tail", "sort", "uniq", "wc", "tee",
        "basename", "dirname", "readlink", "realpath", "pwd", "ls", "mkdir", "rmdir", "rm", "cp", "mv", "ln", "touch",
        "chmod", "date", "sleep", "id", "whoami", "uname", "stat", "mktemp", "yes", "od", "rev", "paste", "join",
        "comm", "fold", "tac", "nl", "which", "timeout", "nohup", "nice", "setsid", "stdbuf", "numfmt", "printenv",
        "md5sum", "sha256sum", "base64", "find", "du", "df", "tput", "column", "getopt", "shuf", "split", "csplit",
        "truncate", "install", "ps", "kill", "sync", "dd", "diff", "cmp", "bc", "tr", "iconv")
SKIP = {".git", ".gpu-doctor", "__pycache__", "node_modules", "wandb", "mlruns"}
COPY_FILE_BYTES = 4 * 1024 * 1024
COPY_FILES = 3000
COPY_BYTES = 64 * 1024 * 1024  # all files together: the copy stays quick whatever the folder holds
MAX_OVERLAYS = 64
_OVERLAID = re.compile(r"(python[\d.]*|pypy\d*|torchrun|srun|mpirun|mpiexec|accelerate|deepspeed|singularity|"
                       r"apptainer|shifter|podman|docker|enroot)")


def _sh(name: str) -> str:
    return str(resources.files("doctor.observe").joinpath("sh").joinpath(name))


def make_stage() -> str:
    stage = tempfile.mkdtemp(prefix="gpu-doctor-observe-")
    os.makedirs(os.path.join(stage, "rec"))
    return stage


def make_bin(stage: str) -> str:
    """The sandbox's PATH: a shim per command that shapes ranks, the real harmless tools beside them."""
    bindir = os.path.join(stage, "bin")
    os.makedirs(bindir)
    open(os.path.join(bindir, "stdin"), "wb").close()  # the job's stdin: empty, and not /dev/null (`cmd &`)
    for name in ("prelude.sh", "record.sh", "shim.sh", "module.sh"):
        shutil.copy(_sh(name), os.path.join(bindir, name))
        os.chmod(os.path.join(bindir, name), 0o755)
    for name in SHIMMED:
        os.symlink("shim.sh", os.path.join(bindir, name))
    path = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
    for name in REAL:
        real = shutil.which(name, path=path)
        if real and not os.path.exists(os.path.join(bindir, name)):
            os.symlink(real, os.path.join(bindir, name))
    return bindir


def copy_folder(root: str, stage: str, planned: Mapping[str, bytes | None]) -> str:
    """A throwaway copy of the job folder (big files and tool folders left out), with `planned` contents."""
    copy = os.path.join(stage, "job")
    count = total = 0

    def ignore(folder: str, names: list[str]) -> set[str]:
        nonlocal count, total
        out = set()
        for n in names:
            p = os.path.join(folder, n)
            count += 1
            if n in SKIP or count > COPY_FILES or (n.startswith(("scorep-", "scorep_")) and os.path.isdir(p)):
                out.add(n)  # experiment folders (scorep-20240501_1200_1, scorep_rank_0) are not read
            else:
                try:
                    st = os.lstat(p)
                except OSError:
                    out.add(n)
                    continue
                if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode) or stat.S_ISLNK(st.st_mode)) or \
                        (stat.S_ISREG(st.st_mode) and st.st_size > COPY_FILE_BYTES):
                    out.add(n)  # a FIFO or device would block the copy; big data is not needed to run
                elif stat.S_ISREG(st.st_mode):
                    total += st.st_size
                    if total > COPY_BYTES:
                        out.add(n)
        return out

    try:
        shutil.copytree(root, copy, symlinks=True, ignore=ignore)
    except shutil.Error:
        pass  # what could not be copied (unreadable) is absent in the copy, as it is to the job's reader
    for path, data in planned.items():
        rel = os.path.relpath(path, root)
        if rel.startswith(".."):
            continue
        target = os.path.join(copy, rel)
        if data is None:
            if os.path.lexists(target):
                os.unlink(target)
            continue
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if os.path.lexists(target):
            os.unlink(target)
        with open(target, "wb") as f:
            f.write(data)
    return copy


def overlays(bindir: str, env_path: str) -> dict[str, str]:
    """Interpreters and launchers named by absolute path (`/usr/bin/python3`): the shim is mounted over them."""
    out: dict[str, str] = {}
    dirs = [*env_path.split(":"), "/usr/local/bin", "/usr/bin", "/bin", "/opt/conda/bin"]
    for d in dict.fromkeys(x for x in dirs if x and os.path.isabs(x)):
        try:
            names = sorted(os.listdir(d))
        except OSError:
            continue
        for n in names:
            p = os.path.join(d, n)
            if _OVERLAID.fullmatch(n) and os.path.isfile(p) and not p.startswith(bindir):
                out[os.path.realpath(p) if os.path.islink(p) else p] = os.path.join(bindir, "shim.sh")
                if len(out) >= MAX_OVERLAYS:
                    return out
    return out


def slurm_env(options: tuple[SbatchOption, ...], job_id: str = "4242") -> dict[str, str]:
    """The environment `sbatch` gives a job script with these `#SBATCH` directives."""
    opts = {o.name: o.value for o in options}
    nodes = _int(opts.get("nodes") or opts.get("N"), 1)
    per = _int(opts.get("ntasks-per-node"), 0)
    tasks = _int(opts.get("ntasks") or opts.get("n"), nodes * per if per else 0)
    env = {"SLURM_JOB_ID": job_id, "SLURM_JOBID": job_id, "SLURM_NNODES": str(nodes), "SLURM_JOB_NUM_NODES": str(nodes),
           "SLURM_JOB_NODELIST": f"gdnode[0-{nodes - 1}]" if nodes > 1 else "gdnode0",
           "SLURM_JOB_NAME": opts.get("job-name") or opts.get("J") or "job", "SLURM_CLUSTER_NAME": "gpu-doctor",
           "SLURM_NODEID": "0", "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURMD_NODENAME": "gdnode0",
           "SLURM_CPUS_ON_NODE": opts.get("cpus-per-task") or "8", "SLURM_JOB_PARTITION": opts.get("partition", "gpu")}
    env["SLURM_NODELIST"] = env["SLURM_JOB_NODELIST"]
    if tasks:
        env["SLURM_NTASKS"] = env["SLURM_NPROCS"] = str(tasks)
    if per:
        env["SLURM_NTASKS_PER_NODE"] = str(per)
    gpus = re.search(r"(\d+)$", opts.get("gpus-per-node") or opts.get("gres") or "")
    if gpus:
        env["SLURM_GPUS_ON_NODE"] = gpus.group(1)
    return env


def _int(text: str | None, default: int) -> int:
    m = re.match(r"\d+", text or "")
    return int(m.group()) if m else default
