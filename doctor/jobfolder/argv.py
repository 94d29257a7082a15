"""What a command line starts: wrappers (srun, timeout, nsys...), Python, Score-P, spawners.

Recognises the real spellings: `python`, `python3`, `/path/python3.11`,
`python -m scorep` with any mix of the binding's flags (`--keep-files`,
`--verbose`, `--nopython`, `--noinstrumenter`, `--instrumenter-type=`,
`--instrumenter-file=`, `--mpi`) and scorep-config flags (`--cuda`,
`--thread=pthread`, `--mpp=...`) before the script, as the binding's own
`scorep_main` parses them; `torchrun`, `python -m torch.distributed.run` /
`.launch`, `accelerate launch`, `deepspeed`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from doctor.jobfolder.model import Launch, ScorepWrap, Spawner, Wrapper

PYTHON_RE = re.compile(r"(?:python|pypy)(?:\d+(?:\.\d+)*)?[dmt]?")
SPAWNER_MODULES = {
    "torch.distributed.run": "torch.distributed.run",
    "torch.distributed.launch": "torch.distributed.launch",
    "accelerate.commands.launch": "accelerate",
    "deepspeed.launcher.runner": "deepspeed",
}
SCOREP_WRAPPER_FLAGS = ("--mpi", "--keep-files", "--verbose", "-v", "--nopython", "--noinstrumenter")

# Options that take a separate value, per wrapper (options with '=' never do).
_SRUN_VALUE = set("-n -N -c -p -t -o -e -i -J -w -x -A -q -G -m -D -d -C -L -r -W -T -S -B".split()) | {
    "--ntasks", "--nodes", "--cpus-per-task", "--partition", "--time", "--output", "--error", "--input",
    "--job-name", "--nodelist", "--exclude", "--account", "--qos", "--gpus", "--gres", "--mem",
    "--ntasks-per-node", "--gpus-per-node", "--gpus-per-task", "--cpu-bind", "--distribution",
    "--chdir", "--dependency", "--constraint", "--mpi", "--export", "--kill-on-bad-exit", "--het-group",
    "--mem-per-cpu", "--mem-per-gpu", "--cpus-per-gpu", "--signal", "--label", "--wait", "--reservation",
}
_MPIRUN_VALUE = {"-np", "-n", "-c", "--np", "-N", "-npernode", "--npernode", "-ppn", "--map-by", "--bind-to",
                 "-x", "-H", "--host", "-hostfile", "--hostfile", "-machinefile", "--rankfile", "-mca",
                 "--mca", "-wdir", "--wdir", "-genv", "-env", "--rank-by", "-f", "-hosts"}
_NSYS_VALUE = {"-o", "--output", "-t", "--trace", "-s", "--sample", "-d", "--duration", "-y", "--delay",
               "-c", "--capture-range", "--stats", "-f", "--force-overwrite", "--cuda-memory-usage",
               "-w", "--show-output", "-e", "--env-var", "-b", "--backtrace", "-x", "--stop-on-exit",
               "--gpu-metrics-device", "-k", "--kernel-name", "--metrics", "--section", "--set",
               "-n", "--nvtx", "--target-processes", "--replay-mode", "--launch-count"}
_TORCHRUN_FLAGS = {"--standalone", "--no-python", "--no_python", "-m", "--module", "--run-path",
                   "--run_path", "--use_env", "--use-env"}
_ACCELERATE_FLAGS = {"--multi_gpu", "--cpu", "--use_deepspeed", "--use_fsdp", "--use_megatron_lm",
                     "--use_xpu", "--debug", "-m", "--module", "--no_python", "--quiet", "-q", "--tpu",
                     "--same_network", "--dynamo_use_fullgraph", "--dynamo_use_dynamic", "--multi-gpu"}
_DEEPSPEED_FLAGS = {"--no_python", "--module", "--no_local_rank", "--force_multi", "--save_pid",
                    "--bind_cores_to_rank", "--no_ssh_check", "--no_ssh", "--enable_each_rank_log"}


def valueless_flags(kind: str) -> set[str]:
    """The options of spawner `kind` (torchrun, accelerate, deepspeed...) that take no value."""
    return {"accelerate": _ACCELERATE_FLAGS, "deepspeed": _DEEPSPEED_FLAGS}.get(kind, _TORCHRUN_FLAGS)


SIMPLE_PREFIX = {"nohup", "exec", "command", "builtin", "stdbuf", "nice", "ionice", "chrt", "taskset",
                 "numactl", "time", "unbuffer", "setsid", "caffeinate", "xvfb-run"}
CUPTI_TOOLS = {"nsys", "ncu", "nv-nsight-cu-cli", "nvprof", "compute-sanitizer", "cuda-memcheck", "dlprof"}
TASK_LAUNCHERS = {"srun", "mpirun", "mpiexec", "orterun", "jsrun", "aprun"}
RUN_TOOLS = {"conda", "mamba", "micromamba", "uv", "poetry", "pipenv", "pixi", "hatch", "pdm"}


def base(word: str) -> str:
    return os.path.basename(word.rstrip("/"))


def is_python(word: str) -> bool:
    return PYTHON_RE.fullmatch(base(word)) is not None


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text, 10)
    except ValueError:
        return None


def _opt_value(argv: list[str], i: int, names: set[str]) -> tuple[str | None, int]:
    """(value of the option at argv[i] if it is one of `names`, next index)."""
    a = argv[i]
    if "=" in a and a.split("=", 1)[0] in names:
        return a.split("=", 1)[1], i + 1
    if a in names and i + 1 < len(argv):
        return argv[i + 1], i + 2
    for n in names:  # -n4
        if len(n) == 2 and a.startswith(n) and len(a) > 2 and not a.startswith("--"):
            return a[2:], i + 1
    return None, i


def _skip_options(argv: list[str], i: int, value_opts: set[str],
                  pair_opts: frozenset[str] = frozenset()) -> tuple[int, dict[str, str]]:
    seen: dict[str, str] = {}
    while i < len(argv) and argv[i].startswith("-") and argv[i] != "-":
        a = argv[i]
        if a == "--":
            return i + 1, seen
        if a in pair_opts:  # MPICH's `-genv NAME VALUE`
            seen[a] = " ".join(argv[i + 1:i + 3])
            i += 3
        elif "=" in a:
            k, v = a.split("=", 1)
            seen[k] = v
            i += 1
        elif a in value_opts:
            seen[a] = argv[i + 1] if i + 1 < len(argv) else ""
            i += 2
        else:
            seen[a] = ""
            i += 1
    return i, seen


MPICH_ENV_OPTS = frozenset({"-genv", "-env"})


def launcher_env(name: str, argv: list[str], start: int, end: int) -> list[tuple[str, ...]]:
    """The environment `srun --export=...` or `mpirun -x NAME=value` / `-genv NAME value` gives its tasks.

    `--export=ALL,NAME=value` adds to the environment; without ALL (`NONE`, `NAME=value,OTHER`)
    the tasks get only what it names (and Slurm's own SLURM_* variables).
    """
    ops: list[tuple[str, ...]] = []
    k = start
    while k < end:
        a = argv[k]
        if name == "srun" and (a.startswith("--export=") or (a == "--export" and k + 1 < end)):
            word, offset = (k, len("--export=")) if a != "--export" else (k + 1, 0)
            ops.extend(_slurm_export(argv[word], word, offset))
            k = word + 1
            continue
        if name != "srun" and a == "-x" and k + 1 < end and re.match(r"[A-Za-z_]\w*=", argv[k + 1]):
            key = argv[k + 1].split("=", 1)[0]
            ops.append(("set", key, argv[k + 1][len(key) + 1:], str(k + 1), str(len(key) + 1), str(len(argv[k + 1]))))
        elif name != "srun" and a in MPICH_ENV_OPTS and k + 2 < end:
            ops.append(("set", argv[k + 1], argv[k + 2], str(k + 2), "0", str(len(argv[k + 2]))))
            k += 2
        k += 1
    return ops


def _slurm_export(text: str, word: int, offset: int) -> list[tuple[str, ...]]:
    items = text[offset:].split(",")
    ops: list[tuple[str, ...]] = [] if any(x in ("ALL", "all") for x in items) else [("clear",)]
    pos = offset
    for item in items:
        key, eq, value = item.partition("=")
        if eq and re.fullmatch(r"[A-Za-z_]\w*", key):
            ops.append(("set", key, value, str(word), str(pos + len(key) + 1), str(pos + len(item))))
        elif re.fullmatch(r"[A-Za-z_]\w*", item) and item not in ("ALL", "NONE", "NIL"):
            ops.append(("keep", item))
        pos += len(item) + 1
    return ops


def strip_wrappers(argv: list[str], unknown: frozenset[int] = frozenset()
                   ) -> tuple[list[Wrapper], list[str], list[tuple[str, ...]]]:
    """Peel srun/mpirun/timeout/env/nsys/apptainer/conda-run... off a command line.

    A word at `unknown` (known only at run time) where a task launcher's options end is read as
    more of its options. Returns the wrappers, the command they run, and the environment operations of `env`,
    `srun --export=` and `mpirun -x`/`-genv`: ('set', NAME, VALUE, argv index, start, end) (the
    value is argv[index][start:end]), ('unset', NAME), ('clear',), ('keep', NAME) (after a clear).
    """
    wrappers: list[Wrapper] = []
    env_ops: list[tuple[str, ...]] = []
    i = 0
    while i < len(argv):
        name = base(argv[i])
        start = i
        if name in TASK_LAUNCHERS:
            value_opts = _SRUN_VALUE if name == "srun" else _MPIRUN_VALUE
            i, seen = _skip_options(argv, i + 1, value_opts, MPICH_ENV_OPTS)
            while i in unknown and i + 1 < len(argv) and _starts_command(argv[i + 1]):
                # `srun $SRUN_ARGS bash -c ...`: options known at run time, then a command
                i, more = _skip_options(argv, i + 1, value_opts, MPICH_ENV_OPTS)
                seen.update(more)
            env_ops.extend(launcher_env(name, argv, start + 1, i))
            tasks = None
            for key in ("-n", "--ntasks", "-np", "--np"):
                if key in seen:
                    tasks = _int(seen[key])
            for k in list(seen):
                if re.fullmatch(r"-n\d+", k):
                    tasks = int(k[2:])
            wrappers.append(Wrapper(name, tuple(argv[start:i]), tasks))
        elif name == "timeout":
            i, _ = _skip_options(argv, i + 1, {"-s", "--signal", "-k", "--kill-after"})
            i += 1  # the duration
            wrappers.append(Wrapper(name, tuple(argv[start:i])))
        elif name == "env":
            i += 1
            while i < len(argv):
                a = argv[i]
                if a in ("-i", "--ignore-environment", "-"):
                    env_ops.append(("clear",))
                    i += 1
                elif a in ("-u", "--unset") and i + 1 < len(argv):
                    env_ops.append(("unset", argv[i + 1]))
                    i += 2
                elif a.startswith("--unset="):
                    env_ops.append(("unset", a.split("=", 1)[1]))
                    i += 1
                elif a in ("-C", "--chdir", "-S", "--split-string") and i + 1 < len(argv):
                    i += 2
                elif a.startswith("-") and "=" not in a:
                    i += 1
                elif re.match(r"[A-Za-z_]\w*=", a):
                    k, v = a.split("=", 1)
                    env_ops.append(("set", k, v, str(i), str(len(k) + 1), str(len(a))))
                    i += 1
                else:
                    break
            wrappers.append(Wrapper(name, tuple(argv[start:i])))
        elif name in CUPTI_TOOLS:
            i += 1
            if i < len(argv) and argv[i] in ("profile", "launch", "nvprof"):
                i += 1
            i, _ = _skip_options(argv, i, _NSYS_VALUE)
            wrappers.append(Wrapper(name, tuple(argv[start:i])))
        elif (name in CONTAINERS and (CONTAINERS[name][0] is None or argv[i + 1:i + 2] == [CONTAINERS[name][0]])
              and i + 1 < len(argv)):
            i, ops = _container(name, argv, i)
            env_ops.extend(ops)
            wrappers.append(Wrapper(name, tuple(argv[start:i])))
        elif name in RUN_TOOLS and i + 1 < len(argv) and argv[i + 1] == "run":
            i, _ = _skip_options(argv, i + 2, {"-n", "--name", "-p", "--prefix", "--with", "--python",
                                                "--env", "-e", "--project"})
            wrappers.append(Wrapper(name, tuple(argv[start:i])))
        elif name in SIMPLE_PREFIX:
            i, _ = _skip_options(argv, i + 1, {"-n", "-c", "-o", "-e", "-i", "--cpunodebind",
                                                "--membind", "-N", "-m", "-C", "-p", "--physcpubind"})
            if name == "taskset" and i < len(argv) and not argv[i].startswith("-") and re.fullmatch(
                    r"(0x)?[0-9a-fA-F,\-]+", argv[i]) and i + 1 < len(argv):
                i += 1  # the mask
            wrappers.append(Wrapper(name, tuple(argv[start:i])))
        else:
            break
    return wrappers, argv[i:], env_ops


# Container wrappers: (the subcommand that runs a command, or None; options taking a value; whether
# the image comes after the options); `-e NAME=value` / `--env NAME=value` set a variable inside.
CONTAINERS: dict[str, tuple[str | None, frozenset[str], bool]] = {
    "apptainer": ("exec", frozenset({"-B", "--bind", "--env", "--home", "-H", "-W", "--workdir", "--overlay", "-o",
                                     "--pwd", "--env-file", "--mount", "--security", "--network", "--app",
                                     "--scratch", "-S", "--fusemount"}), True),
    "shifter": (None, frozenset({"--image", "-i", "--volume", "-V", "--module", "-m", "--env", "-e",
                                 "--env-file", "--workdir", "-w"}), False),
    "enroot": ("start", frozenset({"-m", "--mount", "-e", "--env", "-c", "--conf"}), True),
    "podman": ("run", frozenset({"-e", "--env", "-v", "--volume", "-w", "--workdir", "--name", "--gpus",
                                 "--device", "--ipc", "--network", "--net", "-u", "--user", "--env-file",
                                 "--entrypoint", "--shm-size", "--mount", "--runtime", "--security-opt"}), True),
}
CONTAINERS["singularity"] = CONTAINERS["apptainer"]
CONTAINERS["docker"] = CONTAINERS["podman"]
_CONTAINER_ENV = {"--env", "-e"}
_CONTAINER_CLEAN = {"--cleanenv", "--containall", "-C"}


def _container(name: str, argv: list[str], i: int) -> tuple[int, list[tuple[str, ...]]]:
    """Past `apptainer exec [options] IMAGE` / `shifter [options]` / `docker run [options] IMAGE`:
    (index of the command it runs, the environment it gives that command)."""
    sub, value_opts, image = CONTAINERS[name]
    k = i + (2 if sub else 1)
    ops: list[tuple[str, ...]] = []
    while k < len(argv) and argv[k].startswith("-") and argv[k] != "-":
        a = argv[k]
        if a == "--":
            k += 1
            break
        key, eq, value = a.partition("=")
        if key in _CONTAINER_ENV and not (name in ("apptainer", "singularity") and key == "-e"):
            word, text, offset = (k, value, len(key) + 1) if eq else (k + 1, argv[k + 1] if k + 1 < len(argv) else "", 0)
            m = re.match(r"([A-Za-z_]\w*)=", text)
            if m:
                ops.append(("set", m.group(1), text[m.end():], str(word), str(offset + m.end()),
                            str(offset + len(text))))
            k = word + 1
            continue
        if a in _CONTAINER_CLEAN or (name in ("apptainer", "singularity") and a == "-e"):
            ops.append(("clear",))
        k += 1 if eq or a not in value_opts else 2
    if image and k < len(argv):
        k += 1  # the image
    return k, ops


def _starts_command(word: str) -> bool:
    """Whether `word` after a launcher's run-time-only word is more options or a command it runs
    (a shell, Python, a launcher, a wrapper, a script), not the argument of a program it hides."""
    name = base(word)
    return word.startswith("-") or is_python(word) or word.endswith(".sh") or name in (
        {"bash", "sh", "zsh", "dash", "ksh", "torchrun", "accelerate", "deepspeed", "env", "timeout"}
        | TASK_LAUNCHERS | SIMPLE_PREFIX | CUPTI_TOOLS | set(CONTAINERS))


def parse_scorep(args: list[str]) -> tuple[ScorepWrap, list[str]]:
    """Split `python -m scorep` arguments into the wrapper's flags, scorep-config's, and the program."""
    wrapper: list[str] = []
    config: list[str] = []
    dashdash = False
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            dashdash = True
            i += 1
            continue
        if a in SCOREP_WRAPPER_FLAGS or a.startswith(("--instrumenter-type", "--instrumenter-file")):
            wrapper.append(a)
        elif a.startswith("-") and a != "-":
            config.append(a)
        else:
            break
        i += 1
    return ScorepWrap(tuple(wrapper), tuple(config), dashdash), args[i:]


def parse_spawner(kind: str, args: list[str], resolve: Callable[[str], str | None],
                  modules: Callable[[str], str | None] | None = None
                  ) -> tuple[Spawner, str, list[str], Launch | None, bool]:
    """(spawner, training target, its args, inner launch for --no-python, target is a module)."""
    flags = valueless_flags(kind)
    nproc_keys = {"accelerate": ("--num_processes", "--num-processes"),
                  "deepspeed": ("--num_gpus", "--num-gpus")}.get(kind, ("--nproc_per_node", "--nproc-per-node"))
    i = 0
    seen: dict[str, str] = {}
    while i < len(args) and args[i].startswith("-") and args[i] != "-":
        a = args[i]
        if a == "--":
            i += 1
            break
        if "=" in a:
            k, v = a.split("=", 1)
            seen[k] = v
            i += 1
        elif a in flags:
            seen[a] = ""
            i += 1
        else:
            seen[a] = args[i + 1] if i + 1 < len(args) else ""
            i += 2
    nproc_text = next((seen[k] for k in nproc_keys if k in seen), None)
    no_python = any(k in seen for k in ("--no-python", "--no_python"))
    module = any(k in seen for k in ("-m", "--module"))
    mixed = seen.get("--mixed_precision") or seen.get("--mixed-precision")
    target = args[i] if i < len(args) else ""
    rest = args[i + 1:]
    inner = None
    if no_python and target:
        inner = interpret(args[i:], resolve, modules)
    spawner = Spawner(kind, tuple(args), _int(nproc_text), nproc_text, no_python, None, mixed)
    return spawner, target, rest, inner, module


def _with_target(interp: str, scorep: ScorepWrap | None, program: str, args: list[str],
                 resolve: Callable[[str], str | None], module: bool = False,
                 modules: Callable[[str], str | None] | None = None) -> Launch:
    """The Launch for `program args` run by `interp` (optionally under Score-P)."""
    name = base(program)
    spawn_kind = None
    if module and program in SPAWNER_MODULES:
        spawn_kind = SPAWNER_MODULES[program]
    elif name == "torchrun":
        spawn_kind = "torchrun"
    elif name == "accelerate" and args[:1] == ["launch"]:
        spawn_kind, args = "accelerate", args[1:]
    elif name == "deepspeed":
        spawn_kind = "deepspeed"
    if spawn_kind is not None:
        spawner, target, rest, inner, is_module = parse_spawner(spawn_kind, args, resolve, modules)
        script = None if spawner.no_python else (modules(target) if modules else None) if is_module \
            else resolve(target)
        program_path = resolve(program) if not module and ("/" in program or program.endswith(".py")) else None
        if inner is not None:
            return Launch(interp, "module" if module else "script", program, scorep, spawner,
                          program_path, tuple(args),
                          training_script=inner.training_script, training_target=inner.training_target,
                          training_args=inner.training_args, inner=inner)
        return Launch(interp, "module" if module else "script", program, scorep, spawner,
                      program_path, tuple(args), training_script=script,
                      training_target=target, training_args=tuple(rest))
    if module:
        found = modules(program) if modules is not None else None
        return Launch(interp, "module", program, scorep, None, found, tuple(args), training_script=found,
                      training_target=program, training_args=tuple(args))
    script = resolve(program)
    return Launch(interp, "script", program, scorep, None, script, tuple(args), training_script=script,
                  training_target=program, training_args=tuple(args))


def interpret(argv: list[str], resolve: Callable[[str], str | None],
              modules: Callable[[str], str | None] | None = None) -> Launch | None:
    """The Python start in `argv` (wrappers already stripped), or None if it starts no Python."""
    if not argv:
        return None
    head = argv[0]
    name = base(head)
    if name in ("torchrun", "deepspeed") or (name == "accelerate" and argv[1:2] == ["launch"]):
        return _with_target(head, None, head, argv[1:], resolve, modules=modules)
    if not is_python(head):
        return None
    i = 1
    while i < len(argv):
        a = argv[i]
        if a == "-m" or (a.startswith("-m") and len(a) > 2 and not a.startswith("--")):
            module = argv[i + 1] if a == "-m" and i + 1 < len(argv) else a[2:]
            rest = argv[i + 2:] if a == "-m" else argv[i + 1:]
            if module == "scorep":
                wrap, prog = parse_scorep(rest)
                if not prog:
                    return Launch(head, "none", "", wrap)
                as_module = "-m" in wrap.config_flags and "/" not in prog[0] and not prog[0].endswith(".py")
                return _with_target(head, wrap, prog[0], prog[1:], resolve, module=as_module, modules=modules)
            return _with_target(head, None, module, rest, resolve, module=True, modules=modules)
        if a == "-c":
            code = argv[i + 1] if i + 1 < len(argv) else ""
            return Launch(head, "code", "-c", code=code, args=tuple(argv[i + 2:]))
        if a == "-":
            return Launch(head, "stdin", "-", args=tuple(argv[i + 1:]))
        if a in ("-X", "-W"):
            i += 2
            continue
        if a.startswith("-"):
            i += 1
            continue
        return _with_target(head, None, a, argv[i + 1:], resolve, modules=modules)
    return Launch(head, "stdin", "")


def as_wrapper_spawner(launch: Launch, wrapper_path: str, resolve: Callable[[str], str | None]) -> Launch:
    """Re-read a Launch whose script calls torch.distributed.run.main(): its args are torchrun's."""
    spawner, target, rest, inner, is_module = parse_spawner("torchrun", list(launch.args), resolve)
    spawner = replace(spawner, kind="wrapper-script", wrapper_script=wrapper_path)
    if inner is not None:
        return replace(launch, spawner=spawner, training_script=inner.training_script,
                       training_target=inner.training_target, training_args=inner.training_args, inner=inner)
    return replace(launch, spawner=spawner, training_script=None if is_module else resolve(target),
                   training_target=target, training_args=tuple(rest))


@dataclass(frozen=True)
class ScorepWords:
    """Indices in `cmd.argv` of one `python -m scorep [flags] program` launch."""

    python: int
    scorep: int
    options: tuple[int, ...]
    dashdash: tuple[int, ...]
    target: int | None


def scorep_words(cmd: Any) -> ScorepWords | None:
    """Where `-m scorep` and its flags are in a command's argv (the first such launch)."""
    argv = cmd.argv
    for i in range(1, len(argv) - 1):
        if argv[i] == "-m" and argv[i + 1] == "scorep":
            j = i - 1
            while j > 0 and argv[j].startswith("-"):
                j -= 1
            options: list[int] = []
            dashdash: list[int] = []
            k = i + 2
            while k < len(argv) and argv[k].startswith("-") and argv[k] != "-m":
                (dashdash if argv[k] == "--" else options).append(k)
                k += 1
            return ScorepWords(j, i + 1, tuple(options), tuple(dashdash), k if k < len(argv) else None)
    return None
