"""A throwaway Slurm cluster on 127.0.0.1 for integration tests.

Starts munged, slurmctld and one slurmd per node in the background with state
in a temp folder (no systemd, no cgroups) and stops only the daemons it started
(after cancelling the jobs of its own cluster). Slurm 22.05 from Debian's
packages; `.ci/run` installs them.

    with LocalSlurm(tmp, prolog=script) as slurm:
        job = slurm.sbatch(script_path)
        slurm.wait_job(job)

`nodes=2` emulates a two-node cluster on this one machine: node 1 is this
host's name, node 2 is `localhost`; both names resolve here, so a job's
first node works as MASTER_ADDR. Each slurmd gets its own port, spool
folder and log (`%n` in slurm.conf). Debian's slurmd accepts this without
`--enable-multiple-slurmd` because the two NodeHostnames differ.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import time
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
# One test cluster at a time on this machine (this one or tests/multinode_cluster.py): they
# share slurmctld's and munged's ways of working, and CI runs both marks in one session.
LOCK = Path("/run/lock/gpu-doctor-test-slurm.lock") if Path("/run/lock").is_dir() \
    else Path("/tmp/gpu-doctor-test-slurm.lock")
LOCK_WAIT_S = 600.0


class SlurmUnavailable(RuntimeError):
    """This machine cannot host the test cluster (a reason to skip, not a failure)."""


def slurm_missing() -> str | None:
    """Why a cluster cannot start here, or None."""
    if os.geteuid() != 0:
        return "needs root to run slurmd and munged"
    for tool in ("slurmctld", "slurmd", "munged", "sbatch", "srun", "scontrol"):
        if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists():
            return f"Slurm is not installed ({tool} missing; .ci/run installs it)"
    return None


def cluster_lock(wait_s: float = LOCK_WAIT_S) -> int:
    """Take the machine-wide test-cluster lock (a file descriptor; close it to release)."""
    fd = os.open(LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() > deadline:
                os.close(fd)
                raise SlurmUnavailable(f"another test cluster held {LOCK} for {wait_s:g} s") from None
            time.sleep(0.5)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalSlurm:
    """One node (this host) named `host`, partition `debug`, optional Prolog and fake GPUs."""

    def __init__(self, root: Path, prolog: Path | None = None, gpus: int = 0,
                 prolog_timeout: int = 60, cpus: int | None = None, nodes: int = 1) -> None:
        self.root = root
        self.prolog = prolog
        self.gpus = gpus
        self.prolog_timeout = prolog_timeout
        self.cpus = cpus or max(2, os.cpu_count() or 2)
        self.host = socket.gethostname().split(".")[0]
        if nodes not in (1, 2):
            raise ValueError("LocalSlurm emulates 1 or 2 nodes")
        if nodes == 2 and self.host == "localhost":
            raise RuntimeError("a two-node cluster needs a host name other than localhost")
        self.nodes: tuple[str, ...] = (self.host, "localhost")[:nodes]
        self.conf = root / "slurm.conf"
        self.procs: list[subprocess.Popen[bytes]] = []
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self._lock: int | None = None

    # -- lifecycle -------------------------------------------------------
    def write_conf(self) -> None:
        for d in ("state", "spool", "log", "munge", "dev"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        gres_line = ""
        node_gres = ""
        if self.gpus:
            for i in range(self.gpus):
                dev = self.root / "dev" / f"nvidia{i}"
                if not dev.exists():
                    try:
                        os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(195, i))
                    except PermissionError as exc:
                        raise SlurmUnavailable(f"cannot create fake GPU devices for GRES ({dev}: "
                                               f"{exc.strerror}; a container without CAP_MKNOD?)") from None
            (self.root / "gres.conf").write_text(
                f"NodeName={','.join(self.nodes)} Name=gpu File={self.root}/dev/nvidia[0-{self.gpus - 1}]\n")
            gres_line = "GresTypes=gpu\n"
            node_gres = f" Gres=gpu:{self.gpus}"
        prolog = ""
        if self.prolog:
            prolog = (f"Prolog={self.prolog}\nPrologFlags=Alloc\n"
                      f"PrologEpilogTimeout={self.prolog_timeout}\n")
        node_lines = "".join(f"NodeName={n} NodeAddr=127.0.0.1 Port={free_port()} CPUs={self.cpus} "
                             f"State=UNKNOWN{node_gres}\n" for n in self.nodes)
        r = self.root
        self.conf.write_text(f"""ClusterName=gdtest
SlurmctldHost={self.host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={r}/munge/munge.socket.2,cred_expire=10
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool/%n
SlurmctldPidFile={r}/slurmctld.pid
SlurmdPidFile={r}/slurmd-%n.pid
SlurmctldPort={free_port()}
SlurmctldLogFile={r}/log/slurmctld.log
SlurmdLogFile={r}/log/slurmd-%n.log
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
InactiveLimit=0
KillWait=5
MinJobAge=300
{gres_line}{prolog}{node_lines}PartitionName=debug Nodes={','.join(self.nodes)} Default=YES MaxTime=INFINITE State=UP
""")

    def start(self, timeout: float = 30.0) -> LocalSlurm:
        """Start the daemons and wait until every node is idle; on failure stop what started."""
        self._lock = cluster_lock()
        try:
            return self._start(timeout)
        except BaseException:
            self.stop()
            raise

    def _start(self, timeout: float) -> LocalSlurm:
        self.write_conf()
        self._start_munge(timeout)
        self._spawn(["/usr/sbin/slurmctld", "-D", "-i", "-f", str(self.conf)])
        self._wait(lambda: self._scontrol_ok(), timeout, "slurmctld did not answer")
        for node in self.nodes:
            self._spawn(["/usr/sbin/slurmd", "-D", "-f", str(self.conf), "-N", node])
        self._wait(lambda: all(self.node_state(n) in ("idle", "mixed", "allocated") for n in self.nodes),
                   timeout, "slurmd did not register")
        return self

    def _start_munge(self, timeout: float) -> None:
        munge_dir = self.root / "munge"
        key = munge_dir / "munge.key"
        if not key.exists():
            key.write_bytes(os.urandom(1024))
        os.chmod(munge_dir, 0o700)
        os.chmod(key, 0o400)
        sock = munge_dir / "munge.socket.2"
        self._spawn(["/usr/sbin/munged", "--foreground", "--force", f"--key-file={key}",
                     f"--socket={sock}", f"--pid-file={munge_dir}/munged.pid",
                     f"--log-file={munge_dir}/munged.log", f"--seed-file={munge_dir}/seed"])
        self._wait(lambda: sock.exists(), timeout, "munged did not start")

    def stop(self) -> None:
        """Cancel this cluster's jobs, then stop the daemons this harness started, nothing else."""
        if len(self.procs) > 2 and all(p.poll() is None for p in self.procs):
            try:   # jobs first, so that no job step outlives its slurmd
                self.run("scancel", "--partition=debug", check=False, timeout=10)
                deadline = time.monotonic() + 15
                while time.monotonic() < deadline and self.run(
                        "squeue", "-h", "-t", "RUNNING,COMPLETING", check=False, timeout=10).stdout.strip():
                    time.sleep(0.2)
            except subprocess.TimeoutExpired:
                pass
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.procs.clear()
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None

    def __enter__(self) -> LocalSlurm:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _spawn(self, argv: list[str], log_name: str | None = None) -> None:
        log = open(self.root / "log" / f"{log_name or Path(argv[0]).name}.stdout", "ab")
        self.procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                           env=self.env, start_new_session=True))

    def _wait(self, ready: object, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if callable(ready) and ready():
                return
            for proc in self.procs:
                if proc.poll() is not None:
                    name = Path(str(proc.args[0] if isinstance(proc.args, list) else proc.args)).name
                    raise RuntimeError(f"{what}: {name} exited {proc.returncode}; "
                                       f"logs in {self.root / 'log'}")
            time.sleep(0.2)
        raise RuntimeError(f"{what} within {timeout} s; logs in {self.root / 'log'}")

    # -- client commands -------------------------------------------------
    def run(self, *argv: str, check: bool = True, timeout: float = 60,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """A client command against this cluster (`env`, if given, replaces the environment)."""
        full = {**(self.env if env is None else env), "SLURM_CONF": str(self.conf)}
        return subprocess.run(list(argv), env=full, capture_output=True, text=True,
                              check=check, timeout=timeout)

    def _scontrol_ok(self) -> bool:
        return self.run("scontrol", "ping", check=False, timeout=10).returncode == 0

    def node_info(self, node: str | None = None) -> dict[str, str]:
        """`scontrol show node` as key -> value (Reason keeps its spaces; `_raw` is the text)."""
        out = self.run("scontrol", "show", "node", node or self.host, check=False, timeout=10).stdout
        info = dict(re.findall(r"(\w+)=(\S+)", out))
        reason = re.search(r"\bReason=(.*?)(?: \[[^\]]*\])?\s*$", out, re.MULTILINE)
        if reason:
            info["Reason"] = reason.group(1)
        return info | {"_raw": out}

    def node_state(self, node: str | None = None) -> str:
        """The base state in lower case: idle, mixed, allocated, down, ... (flags dropped)."""
        return self.node_info(node).get("State", "").lower().split("+")[0]

    def node_flags(self, node: str | None = None) -> set[str]:
        """The state's flags in upper case, e.g. {"DRAIN"} for `IDLE+DRAIN`."""
        return set(self.node_info(node).get("State", "").upper().split("+")[1:])

    def resume(self, node: str | None = None) -> None:
        self.run("scontrol", "update", f"nodename={node or self.host}", "state=resume", check=False)

    def sbatch(self, script: Path, *args: str, env: dict[str, str] | None = None) -> str:
        """Submit; the job gets `env` (sbatch exports the submitter's environment). The job id."""
        out = self.run("sbatch", "--parsable", *args, str(script), env=env).stdout.strip()
        return out.split(";")[0]

    def job_state(self, job: str) -> str:
        out = self.run("scontrol", "show", "job", job, check=False, timeout=10).stdout
        m = re.search(r"JobState=(\S+)", out)
        return m.group(1) if m else "UNKNOWN"

    def job_info(self, job: str) -> str:
        return self.run("scontrol", "show", "job", job, check=False, timeout=10).stdout

    def job_field(self, job: str, name: str) -> str:
        """One `Name=value` of `scontrol show job` ("" when absent)."""
        m = re.search(rf"\b{name}=(\S*)", self.job_info(job))
        return m.group(1) if m else ""

    def wait_job(self, job: str, states: tuple[str, ...] = ("COMPLETED", "FAILED", "CANCELLED",
                                                          "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"),
                 timeout: float = 120.0) -> str:
        deadline = time.monotonic() + timeout
        state = "UNKNOWN"
        while time.monotonic() < deadline:
            state = self.job_state(job)
            if state in states:
                return state
            time.sleep(0.3)
        raise TimeoutError(f"job {job} still {state} after {timeout} s")

    def wait_until(self, pred: object, timeout: float = 60.0, what: str = "condition") -> None:
        self._wait(pred, timeout, what)
