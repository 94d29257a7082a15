"""What gpu-doctor may run when the job's owner is somebody else (root in a Slurm prologue).

`guarded(case)`: the gate as root, or any run whose effective user is not the
job folder's owner. Then nothing the owner can change may run: every tool is
resolved to its real path and its siblings are taken from there
(`scorep-info` beside the real `scorep-config`, never beside a symlink in the
user's `bin/`); an interpreter is refused when it, its `pyvenv.cfg`, its
prefix's `site-packages` or a `.pth` file in them can be written by anybody but
root or us; an interpreter that runs is started isolated (`-I`), in a neutral
working folder (`NEUTRAL_CWD`), with a clean environment (`clean_env`). Each
refusal is recorded on the fact that refused (`refused`), and the gate says them
all in one line (`skipped_line`).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from doctor.case import Case

NEUTRAL_CWD = "/"
SAFE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# What a probe keeps of gpu-doctor's own environment when guarded (the GPUs it may see, the locale).
KEPT_VARS = ("LANG", "LC_ALL", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER",
             "SLURM_JOB_GPUS", "SLURM_STEP_GPUS")


def folder_owner(case: Case) -> int | None:
    """The uid owning the job folder (None without one, or when it cannot be read)."""
    if case.root is None:
        return None
    root = case.root if case.root.is_dir() else case.root.parent
    try:
        return os.stat(root).st_uid
    except OSError:
        return None


def guarded(case: Case) -> bool:
    """Whether the job's owner must not influence what runs: the gate as root, or a foreign folder."""
    if case.gate and case.as_root:
        return True
    owner = folder_owner(case)
    return owner is not None and hasattr(os, "geteuid") and owner != os.geteuid()


def writable_by_others(path: str) -> str | None:
    """Why `path` (resolved) or a folder above it can be changed by somebody but root or us, or None."""
    me = os.geteuid()
    cur = os.path.realpath(path)
    while True:
        try:
            st = os.stat(cur)
        except OSError as exc:
            return f"cannot inspect {cur}: {exc.strerror or exc}"
        if st.st_uid not in (0, me):
            return f"{cur} is owned by uid {st.st_uid}"
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return f"{cur} is writable by {'others' if st.st_mode & stat.S_IWOTH else 'its group'}"
        parent = os.path.dirname(cur)
        if parent == cur:
            return None
        cur = parent


def sibling(real: str, name: str) -> str:
    """The tool `name` beside the real (resolved) path of another one."""
    return os.path.join(os.path.dirname(os.path.realpath(real)), name)


def venv_config(python: str) -> str | None:
    """The `pyvenv.cfg` Python would read for this (unresolved) path: beside it or one folder up."""
    here = os.path.dirname(os.path.abspath(python))
    for folder in (here, os.path.dirname(here)):
        cfg = os.path.join(folder, "pyvenv.cfg")
        if os.path.lexists(cfg):
            return cfg
    return None


def site_folders(prefix: str) -> list[str]:
    """The `site-packages`/`dist-packages` folders under an interpreter prefix (`lib*/python3*/`)."""
    out: list[str] = []
    for lib in ("lib", "lib64", "local/lib"):
        base = Path(prefix) / lib
        try:
            versions = sorted(p for p in base.iterdir() if p.name.startswith("python3"))
        except OSError:
            continue
        for v in versions:
            out += [str(v / s) for s in ("site-packages", "dist-packages") if (v / s).is_dir()]
    return out


def interpreter_refusal(python: str) -> str | None:
    """Why `python` must not run while guarded (None: it may, isolated, as `interpreter_argv0`)."""
    why = writable_by_others(python)
    if why:
        return f"{python}: {why}"
    cfg = venv_config(python)
    prefixes = [os.path.dirname(os.path.dirname(os.path.realpath(python)))]
    if cfg is not None:  # a venv runs by its own path: that folder must be safe too (no swapped link)
        why = writable_by_others(cfg) or writable_by_others(os.path.dirname(os.path.abspath(python)))
        if why:
            return f"{python}: its pyvenv.cfg {cfg}: {why}"
        prefixes.append(os.path.dirname(cfg))
    for prefix in prefixes:
        for folder in site_folders(prefix):
            why = writable_by_others(folder)
            if why:
                return f"{python}: its site-packages {folder}: {why}"
            try:
                pths = sorted(n for n in os.listdir(folder) if n.endswith(".pth"))
            except OSError:
                pths = []
            for name in pths:
                why = writable_by_others(os.path.join(folder, name))
                if why:
                    return f"{python}: {os.path.join(folder, name)}: {why}"
    return None


def interpreter_argv0(python: str) -> str:
    """What to start: the path itself when a (trusted) venv belongs to it, else its real path."""
    return python if venv_config(python) is not None else os.path.realpath(python)


def admin_path(code: str, env: Mapping[str, str]) -> str:
    """`code` for `python -I -c`, with the PYTHONPATH of gpu-doctor's own environment (the admin's,
    never the job's) put on sys.path by hand: `-I` ignores the variable, not the admin's choice."""
    entries = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    return f"import sys; sys.path[:0] = {entries!r}\n{code}" if entries else code


def clean_env(env: Mapping[str, str], tool_dir: str | None = None) -> dict[str, str]:
    """The environment of a guarded probe: a system PATH (after the tool's own folder) and `KEPT_VARS`."""
    path = f"{tool_dir}:{SAFE_PATH}" if tool_dir else SAFE_PATH
    return {"PATH": path, **{k: env[k] for k in KEPT_VARS if k in env}, "LANG": env.get("LANG", "C")}


def as_whom() -> str:
    """'as root', or 'as uid N' for another user looking at somebody else's folder."""
    uid = os.geteuid() if hasattr(os, "geteuid") else -1
    return "as root" if uid == 0 else f"as uid {uid}"


class Refused(RuntimeError):
    """Raised by a provider that will not run what the job's owner can change (its fact fails)."""


def refused(fact: Mapping[str, Any] | Any) -> list[str]:
    """The refusals a fact recorded (`{"refused": [...]}`, or a provider's `Refused`), else none."""
    detail = getattr(fact, "detail", None)
    if isinstance(detail, str) and detail.startswith(f"{Refused.__name__}: "):
        return [detail[len(Refused.__name__) + 2:]]
    if isinstance(fact, Mapping):
        value = fact.get("refused")
        if isinstance(value, list):
            return [str(v) for v in value]
        if isinstance(value, str):
            return [value]
    return []


def skipped_line(facts: Mapping[str, Any]) -> str | None:
    """One line naming every probe that did not run because the job's owner could change what it runs."""
    said = [f"{name}: {why}" for name in sorted(facts) for why in refused(facts[name])]
    if not said:
        return None
    return ("gpu-doctor: not run because the job's owner can change what they run: " + "; ".join(said))
