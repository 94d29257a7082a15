"""Remedies for how the job is launched (LNC001-LNC003, and the node's GPU003/GPU004).

- `per-rank-launch` (unsafe: it changes how the ranks start) writes a per-rank
  launch script next to the job script (one `python -m scorep` per rank, field
  guide error 8) and makes the job script call it instead of torchrun.
- `cuda-warmup` (safe) puts the field guide's warm-up loop (errors 1-3) before
  the instrumented launch: a real CUDA op in try/except, outside Score-P.
- `exclude-node` (safe) adds the node that failed GPU003 to `#SBATCH --exclude=`.
"""

from __future__ import annotations

import re
from pathlib import Path

from doctor.model import Phase, Safety, Status
from doctor.registry import remedy
from doctor.remedy.draft import RemedyContext
from doctor.remedy.edits import launch_files, shell_files
from doctor.remedy.launchline import ScorepLaunch, Torchrun, wrapped_torchrun
from doctor.remedy.model import SCRIPT_LINE, CannotPlan
from doctor.remedy.shell import ShellScript, Word
from doctor.remedy.text import TextDoc

TEMPLATE = Path(__file__).with_name("per_rank_launch.sh")
LAUNCH_NAME = "run_ranks.sh"
WARMUP_MARK = "gpu-doctor: cuda-warmup"
RANK_VARS = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
             "NPROC", "SCOREP_EXPERIMENT_DIRECTORY"}
_VAR_RE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)")


def warmup_block(python: str, indent: str = "") -> list[str]:
    """The warm-up loop of the field guide (error 3): a real CUDA op, retried, outside Score-P."""
    lines = [
        f"# {WARMUP_MARK}: initialise the CUDA runtime before python -m scorep preloads",
        "# its CUDA adapter (a runtime that is not ready then stays broken for that process).",
        "cuda_ready=0",
        'for attempt in $(seq 1 "${WARMUP_ATTEMPTS:-30}"); do',
        f'    if {python} -c "',
        "import sys, torch",
        "try:",
        "    torch.zeros(1).cuda()",
        "except Exception:",
        "    sys.exit(1)",
        '" 2>/dev/null; then',
        '        echo "CUDA runtime ready after $attempt attempt(s)."',
        "        cuda_ready=1",
        "        break",
        "    fi",
        '    echo "CUDA runtime not ready (attempt $attempt/${WARMUP_ATTEMPTS:-30}), '
        'sleeping ${WARMUP_SLEEP:-10}s..."',
        '    sleep "${WARMUP_SLEEP:-10}"',
        "done",
        'if [ "$cuda_ready" != 1 ]; then',
        '    echo "CUDA runtime never became ready on $(hostname): exclude this node '
        '(gpu-doctor GPU003)" >&2',
        "    exit 1",
        "fi",
    ]
    # Lines inside the python -c string keep column 0: Python reads them.
    inside = range(5, 11)
    return [ln if i in inside or not ln else indent + ln for i, ln in enumerate(lines)]


@remedy("cuda-warmup", Safety.SAFE,
        "Warm up the CUDA runtime outside Score-P before the instrumented launch",
        phase=Phase.LAUNCH, after=["per-rank-launch"], fixes=["LNC002", "GPU003", "GPU004"])
def cuda_warmup(ctx: RemedyContext) -> None:
    files = launch_files(ctx)
    if not files:
        if "per-rank-launch" in ctx.planned:
            ctx.note = "the per-rank launch script warms CUDA up before its ranks"
            return
        raise CannotPlan("no `python -m scorep` launch found to put a warm-up before",
                         ["Before the instrumented launch, run a real CUDA op until it succeeds; "
                          "see the loop in the field guide (error 3) or `gpu-doctor explain LNC002`."])
    for path, doc, _script, launches in files:
        if WARMUP_MARK in doc.text:
            ctx.note = "the warm-up is already there"
            continue
        top = min(la.cmd.top_line for la in launches)
        python = launches[0].python.raw
        doc.insert_lines_before(top, warmup_block(python, doc.indent_of(top)))
        ctx.write_doc(path, doc, SCRIPT_LINE, "CUDA warm-up loop before the instrumented launch", top)


@remedy("per-rank-launch", Safety.UNSAFE,
        "Launch one python -m scorep per rank instead of wrapping torchrun",
        phase=Phase.LAUNCH, fixes=["LNC001", "ART001"])
def per_rank_launch(ctx: RemedyContext) -> None:
    done = False
    for path, _doc, _script, launches in launch_files(ctx):
        for la in launches:
            run = wrapped_torchrun(la, path.parent)
            if run is None:
                continue
            _check_supported(path, la, run)
            target = _free_name(ctx, path.parent)
            ctx.create(target, launch_script(la, run, target.name, f"{path.name}:{la.cmd.line}"),
                       f"per-rank launch script: one python -m scorep per rank ({target.name})", 0o755)
            doc = ctx.read_doc(path)
            _replace_launch(doc, ShellScript(doc), la, run, target, path)
            ctx.write_doc(path, doc, SCRIPT_LINE, f"torchrun under python -m scorep -> bash ./{target.name}",
                          la.cmd.line)
            done = True
            break  # one launch per script: the offsets of the rest moved
    if not done:
        spawners = {str(t.data.get("spawner")) for t in ctx.targets() if t.data.get("spawner")}
        if spawners - {"torchrun", "torch.distributed.run", "torch.distributed.launch", "wrapper-script"}:
            raise CannotPlan(f"python -m scorep wraps {', '.join(sorted(spawners))}, which gpu-doctor cannot "
                             "rewrite into a per-rank launch",
                             ["Start each rank yourself as its own `python -m scorep --cuda train.py ...` with "
                              "RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT and "
                              "SCOREP_EXPERIMENT_DIRECTORY=scorep_rank_N (field guide, error 8), or use "
                              "`gpu-doctor launch`."])
        ctx.note = "no python -m scorep launch wraps torchrun"


def _check_supported(path: Path, la: ScorepLaunch, run: Torchrun) -> None:
    where = f"{path.name}:{la.cmd.line}"
    nnodes = run.option("--nnodes") or "1"
    if nnodes not in ("1", "1:1"):
        raise CannotPlan(f"{where}: torchrun runs on {nnodes} nodes; a per-rank script is for one node",
                         ["Inside a Slurm allocation, start one task per rank with srun, each task "
                          "its own python -m scorep with SCOREP_EXPERIMENT_DIRECTORY=scorep_rank_"
                          "$SLURM_PROCID (or use gpu-doctor launch)."])
    if run.script is None or "-m" in run.flags or "--module" in run.flags or "--no_python" in run.flags:
        raise CannotPlan(f"{where}: torchrun does not start a Python script file here",
                         ["Write the per-rank loop by hand: see the field guide (error 8)."])


def _free_name(ctx: RemedyContext, folder: Path) -> Path:
    for n in range(1, 100):
        path = folder / (LAUNCH_NAME if n == 1 else f"run_ranks_{n}.sh")
        if ctx.draft.read(path) is None:
            return path
    raise CannotPlan(f"no free name for the per-rank launch script in {folder}")


def launch_script(la: ScorepLaunch, run: Torchrun, name: str, source: str) -> str:
    nproc = run.option("--nproc_per_node") or "1"
    flags = "".join(" " + o.raw for o in la.options)
    text = TEMPLATE.read_text(encoding="utf-8")
    for key, value in (("@WARMUP@", "\n".join(warmup_block(la.python.raw, "    "))),
                       ("@SCRIPT@", _args_text(run)), ("@SCOREP_FLAGS@", flags),
                       ("@PYTHON@", la.python.raw), ("@NPROC@", nproc if nproc.isdigit() else "gpu"),
                       ("@NAME@", name), ("@SOURCE@", source)):
        text = text.replace(key, value)
    return text


def _args_text(run: Torchrun) -> str:
    """The training script and its arguments as written, one option per line when long."""
    assert run.script is not None
    words = [run.script, *run.script_args]
    flat = " ".join(w.raw for w in words)
    if len(flat) <= 70:
        return flat
    groups: list[list[Word]] = []
    for w in words:
        if not groups or w.text.startswith("-"):
            groups.append([w])
        else:
            groups[-1].append(w)
    return " \\\n                ".join(" ".join(w.raw for w in g) for g in groups)


def _replace_launch(doc: TextDoc, script: ShellScript, la: ScorepLaunch, run: Torchrun,
                    target: Path, path: Path) -> None:
    """Replace the launch command (up to its last word; redirections stay) with the script's call."""
    cmd = next(c for c in script.commands if c.start == la.cmd.start)
    used = set()
    for w in [la.python, *la.options, *(run.script,), *run.script_args]:
        if w is not None:
            used.update(_VAR_RE.findall(w.raw))
    local = _unexported(script) | {v for c in script.commands for v in c.loops}
    prefix = [a.word.raw for a in script.prefix_assignments(cmd) if a.name not in RANK_VARS]
    prefix += [f'{v}="${v}"' for v in sorted(used & local - RANK_VARS)]
    for opt, var in (("--master_port", "MASTER_PORT"), ("--master_addr", "MASTER_ADDR")):
        if run.option(opt):
            prefix.append(f"{var}={run.option(opt)}")
    rel = target.name if target.parent == path.parent else str(target)
    call = " ".join(prefix + ["bash", f"./{rel}" if "/" not in rel else rel])
    nproc = run.option("--nproc_per_node")
    if nproc and not nproc.isdigit():
        call += f" --nproc {nproc}"
    doc.replace(cmd.start, cmd.words[-1].end, call)


def _unexported(script: ShellScript) -> set[str]:
    """Variables the script sets without exporting them (the per-rank script would not see them)."""
    assigned = {a.name for a in script.assignments() if a.how == "bare"}
    exported = {a.name for a in script.assignments() if a.how == "export"}
    for cmd in script.commands:
        if cmd.words and cmd.words[0].text == "export":
            exported.update(w.text for w in cmd.words[1:] if "=" not in w.text)
    return assigned - exported


@remedy("exclude-node", Safety.SAFE,
        "Keep the job off a node whose CUDA runtime never became ready (#SBATCH --exclude=)",
        phase=Phase.LAUNCH, fixes=["LNC003", "GPU003"])
def exclude_node(ctx: RemedyContext) -> None:
    nodes = _bad_nodes(ctx)
    if not nodes:
        raise CannotPlan("no node is known to have failed GPU003",
                         ["Run `gpu-doctor --check-only --json-file verdict.json` on the suspect node, "
                          "then `gpu-doctor fix --findings verdict.json`; or add `#SBATCH "
                          "--exclude=<node>` to the job script yourself."])
    paths = [p for p in shell_files(ctx) if "#SBATCH" in ctx.read_doc(p).text] or shell_files(ctx)[:1]
    if not paths:
        raise CannotPlan("no job script found", [f"Add `#SBATCH --exclude={','.join(nodes)}`."])
    for path in paths:
        doc = ctx.read_doc(path)
        line = add_exclude(doc, nodes)
        if line is not None:
            ctx.write_doc(path, doc, SCRIPT_LINE, f"#SBATCH --exclude={','.join(nodes)}", line)
        else:
            ctx.note = f"{', '.join(nodes)} already excluded"


def _bad_nodes(ctx: RemedyContext) -> list[str]:
    nodes: dict[str, None] = {}
    for t in ctx.targets():
        for key in ("node", "nodes", "host", "hosts"):
            value = t.data.get(key)
            for n in ([value] if isinstance(value, str) else list(value or [])):
                nodes.setdefault(str(n), None)
    for f in ctx.findings_of("GPU003"):
        if f.status == Status.FAIL:
            nodes.setdefault(str(f.entities.get("host") or ctx.case.host), None)
    return [n for n in nodes if n]


_EXCLUDE_RE = re.compile(r"^(\s*#SBATCH\s+)(?:--exclude[= ]|-x\s*)(\S+)")


def add_exclude(doc: TextDoc, nodes: list[str]) -> int | None:
    """Extend an `#SBATCH --exclude=` line or add one after the last `#SBATCH` header line."""
    last_sbatch = None
    first_command = None
    for n in range(1, doc.line_count + 1):
        text = doc.line_text(n)
        stripped = text.strip()
        if stripped.startswith("#SBATCH"):
            if first_command is None:
                last_sbatch = n
            m = _EXCLUDE_RE.match(text)
            if m and first_command is None:
                have = m.group(2).split(",")
                missing = [x for x in nodes if x not in have]
                if not missing:
                    return None
                start = doc.line_start(n) + m.end(2)
                doc.insert(start, "," + ",".join(missing))
                return n
        elif stripped and not stripped.startswith("#") and first_command is None:
            first_command = n
    line = f"#SBATCH --exclude={','.join(nodes)}"
    if last_sbatch is not None:
        doc.insert_lines_after(last_sbatch, [line])
        return last_sbatch + 1
    shebang = 1 if doc.line_count and doc.line_text(1).startswith("#!") else 0
    doc.insert_lines_after(shebang, [line]) if shebang else doc.insert_lines_before(1, [line])
    return shebang + 1
