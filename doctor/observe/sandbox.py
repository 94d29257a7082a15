"""Run a job script under the real bash in a sandbox, and leave nothing behind.

The sandbox is bubblewrap (`bwrap`) where it works, else `unshare` (user, mount, network and pid
namespaces): the system is read-only, the network is off, the user's home and /tmp are empty,
the job folder is a throwaway copy mounted where the folder is (so every path reads as the
user's own), and time, output file size, memory and process count are bounded. The sandbox's
pid namespace ends with its first process, so nothing the script starts outlives the reading,
whatever it forks; the caller kills the whole sandbox when the time is up. As root the same
holds: the script runs in a new user namespace without capabilities in the real one.
"""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import time
from dataclasses import dataclass
from functools import lru_cache

OUTPUT_BYTES = 16 * 1024 * 1024  # what the script may write to a file, its output included
MEMORY_BYTES = 2 * 1024 * 1024 * 1024  # virtual memory per process
PROCESSES = 256
NAMES = {"bubblewrap": "bubblewrap (bwrap)", "unshare": "unshare (user, mount, network and pid namespaces)"}


@dataclass(frozen=True)
class Outcome:
    """How the sandboxed script ended."""

    rc: int | None
    timed_out: bool
    output_cut: bool
    seconds: float
    output_tail: str


def _probe(argv: list[str]) -> bool:
    try:
        return subprocess.run(argv, capture_output=True, timeout=10, check=False).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@lru_cache(maxsize=4)
def _kind(forced: str | None) -> str | None:
    if forced in ("none", "off"):
        return None
    bwrap = shutil.which("bwrap")
    if forced in (None, "bubblewrap", "bwrap") and bwrap and _probe(
            [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-all", "--die-with-parent",
             "/bin/true"]):
        return "bubblewrap"
    unshare = shutil.which("unshare")
    if forced in (None, "unshare") and unshare and _probe(
            [unshare, "--user", "--map-root-user", "--mount", "--net", "--pid", "--fork", "--kill-child", "/bin/true"]):
        return "unshare"
    return None


def kind() -> str | None:
    """The sandbox this machine has: "bubblewrap", "unshare", or None (GPU_DOCTOR_SANDBOX forces one)."""
    return _kind(os.environ.get("GPU_DOCTOR_SANDBOX") or None)


def _limits(seconds: float) -> str:
    return (f"ulimit -f {OUTPUT_BYTES // 1024} -v {MEMORY_BYTES // 1024} -u {PROCESSES} "
            f"-t {int(seconds) + 2} -c 0 2>/dev/null; ")


def _bwrap(root: str, copy: str, keep: list[str], rw: list[str], overlays: dict[str, str],
           home: str | None) -> list[str]:
    argv = [shutil.which("bwrap") or "bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
            "--tmpfs", "/tmp", "--tmpfs", "/var/tmp", "--tmpfs", "/dev/shm"]
    if home and os.path.isdir(home) and os.path.abspath(home) not in ("/", "/tmp"):
        argv += ["--tmpfs", home]
    argv += ["--bind", copy, root]
    for path in keep:
        argv += ["--ro-bind", path, path]
    for path in rw:
        argv += ["--bind", path, path]
    for target, shim in overlays.items():
        argv += ["--ro-bind", shim, target]
    return argv + ["--unshare-all", "--die-with-parent", "--new-session", "--chdir", root, "--"]


_UNSHARE_SETUP = r"""
set -e
JOB_PATH=$PATH PATH=/usr/sbin:/usr/bin:/sbin:/bin
mount --make-rprivate /
mount --bind "$GD_COPY" "$GD_ROOTDIR"
mount --bind "$GD_REC" "$GD_REC"
for p in $GD_OVERLAYS; do mount --bind "${p#*=}" "${p%%=*}"; done
awk '{print $5}' /proc/self/mountinfo | sort -r | while read -r mp; do
  case "$mp" in "$GD_ROOTDIR"|"$GD_REC"|"$GD_STAGE"*) ;; *) mount -o remount,bind,ro "$mp" 2>/dev/null || true;; esac
done
mount -t tmpfs none "$GD_STAGE/empty" && for d in /var/tmp /dev/shm ${GD_HOME:-}; do
  [ -d "$d" ] && [ "$d" != / ] && mount --bind "$GD_STAGE/empty" "$d" || true; done
cd "$GD_ROOTDIR"
PATH=$JOB_PATH
"""


def _unshare(root: str, copy: str, stage: str, overlays: dict[str, str], home: str | None) -> tuple[list[str], dict]:
    os.makedirs(os.path.join(stage, "empty"), exist_ok=True)
    env = {"GD_COPY": copy, "GD_ROOTDIR": root, "GD_STAGE": stage,
           "GD_OVERLAYS": " ".join(f"{t}={s}" for t, s in overlays.items()), "GD_HOME": home or ""}
    argv = [shutil.which("unshare") or "unshare", "--user", "--map-root-user", "--mount", "--net", "--pid",
            "--fork", "--kill-child", "--mount-proc", "/bin/bash", "-c", _UNSHARE_SETUP + 'exec "$@"', "gd-setup"]
    return argv, env


def run(kind: str, root: str, copy: str, stage: str, script: str, env: dict[str, str], keep: list[str],
        rw: list[str], overlays: dict[str, str], seconds: float, log: str) -> Outcome:
    """Run `bash script` in the sandbox at `root` (which shows `copy`), within `seconds`."""
    home = env.get("HOME")
    # BASH_ENV (the recording prelude) reaches the job's bash only, not the shells that set the sandbox up
    tail = ["/bin/bash", "--noprofile", "--norc", "-c",
            _limits(seconds) + 'BASH_ENV=$GD_BASH_ENV exec /bin/bash --noprofile --norc "$0"', script]
    env = {k: v for k, v in env.items() if k != "BASH_ENV"} | {"GD_BASH_ENV": env.get("BASH_ENV", "")}
    extra: dict[str, str] = {}
    if kind == "bubblewrap":
        nobody = _as_nobody(root, stage)
        if nobody:  # nobody cannot mount over what it cannot reach (an interpreter under /root)
            overlays = {t: s for t, s in overlays.items() if _traversable(os.path.dirname(t))}
        argv = nobody + _bwrap(root, copy, keep, rw, overlays, home) + tail
    else:
        argv, extra = _unshare(root, copy, stage, overlays, home)
        argv += tail
    start = time.monotonic()
    timed_out = False
    with open(log, "wb") as out, open(env["GD_STDIN"], "rb") as stdin:
        try:
            proc = subprocess.Popen(argv, stdin=stdin, stdout=subprocess.DEVNULL, stderr=out, env={**env, **extra},
                                    cwd=stage, start_new_session=True)
        except OSError as exc:
            return Outcome(None, False, False, 0.0, f"cannot start the sandbox: {exc}")
        try:
            rc: int | None = proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            timed_out = True
            rc = None
        finally:
            _kill(proc)
    size = os.path.getsize(log)
    with open(log, "rb") as f:
        f.seek(max(0, size - 4000))
        text = f.read().decode("utf-8", "replace")
    return Outcome(rc, timed_out, size >= OUTPUT_BYTES, time.monotonic() - start, text)


NOBODY = 65534


def _as_nobody(root: str, stage: str) -> list[str]:
    """As root, the sandbox runs as nobody: the process limit holds only for a user without privileges
    (root's own count is not limited, even in a user namespace). Where nobody cannot reach the job
    folder's path (a 0700 folder above it), it stays root: the time bound and the pid namespace hold."""
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None or not _traversable(root):
        return []
    try:
        os.chmod(stage, 0o755)
        for folder, dirs, files in os.walk(stage):
            for name in [folder, *(os.path.join(folder, n) for n in dirs + files)]:
                os.lchown(name, NOBODY, NOBODY)
    except OSError:
        return []
    return [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]


def _traversable(path: str) -> bool:
    cur = os.path.realpath(path)
    while True:
        try:
            if not os.stat(cur).st_mode & stat.S_IXOTH:
                return False
        except OSError:
            return False
        if cur == os.path.dirname(cur):
            return True
        cur = os.path.dirname(cur)


def _kill(proc: subprocess.Popen) -> None:  # type: ignore[type-arg]
    """The sandbox and everything in it (its pid namespace dies with its first process)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
