"""`#SBATCH` directives: Slurm reads them from the top of the job script until the first command."""

from __future__ import annotations

import shlex

from doctor.jobfolder.model import EnvVar, SbatchOption, Site


def sbatch_options(path: str, text: str) -> tuple[SbatchOption, ...]:
    """`#SBATCH` directives (Slurm reads them until the first command)."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s:
            continue
        if not s.startswith("#"):
            break
        if not s.startswith("#SBATCH"):
            continue
        try:
            tokens = shlex.split(s[len("#SBATCH"):], comments=True)
        except ValueError:
            tokens = s[len("#SBATCH"):].split()
        i = 0
        while i < len(tokens):
            t = tokens[i]
            if t.startswith("--"):
                name, _, value = t[2:].partition("=")
                if not _ and i + 1 < len(tokens) and not tokens[i + 1].startswith("-"):
                    value = tokens[i + 1]
                    i += 1
            elif t.startswith("-") and len(t) >= 2:
                name = _SHORT_SBATCH.get(t[1], t[1])
                value = t[2:]
                if not value and i + 1 < len(tokens) and not tokens[i + 1].startswith("-"):
                    value = tokens[i + 1]
                    i += 1
            else:
                i += 1
                continue
            out.append(SbatchOption(name, value, Site(path, n, s)))
            i += 1
    return tuple(out)


_SHORT_SBATCH = {"x": "exclude", "w": "nodelist", "n": "ntasks", "N": "nodes", "G": "gpus",
                 "p": "partition", "t": "time", "J": "job-name", "c": "cpus-per-task", "o": "output",
                 "e": "error", "A": "account", "D": "chdir"}


def sbatch_exports(options: tuple[SbatchOption, ...]) -> dict[str, EnvVar]:
    """Variables `#SBATCH --export=ALL,NAME=value,...` puts into the job's environment."""
    out: dict[str, EnvVar] = {}
    for opt in options:
        if opt.name != "export":
            continue
        for item in opt.value.split(","):
            name, eq, value = item.partition("=")
            if eq and name.isidentifier():
                out[name] = EnvVar(name, value, value, opt.site, True)
    return out
