"""A corpus of hostile job folders, one per kind of damage the fuzzing campaign found (issue 20).

`make_corpus(root, seed)` writes them under `root` and returns `{name: folder}`. Each folder is
a small but real Slurm job (an sbatch script that launches `python -m scorep` on a training
script) with one hostile part: a FIFO or a device where a file should be, a script that
expands without bound, a YAML alias bomb, a file far over the size caps, random bytes, or
planted secrets. Random parts come from `random.Random(seed)`, so a failing seed reproduces.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from pathlib import Path

SBATCH = """#!/bin/bash
#SBATCH --job-name=ddp-fuzz
#SBATCH --nodes=1
#SBATCH --gres=gpu:2
#SBATCH --time=00:30:00
export SCOREP_ENABLE_TRACING=true
export SCOREP_TOTAL_MEMORY=500M
srun python -m scorep --cuda train.py --fp16 {extra}
"""
TRAIN = """import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 8).cuda())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
"""
# Planted in logs and scripts; none may reach any report format.
SECRETS = {
    "email": "ops.fuzz+ddp@hpc-example.org",
    "pem": "MIIBOgIBAAJBAKj34GkxFhD9",
    "pem_short": "Zm9vYmFy",
    "quoted": "horse battery staple",
    "netrc": "fuzzNetrcPw9",
    "prose": "fuzzProsePw7",
    "hf": "hf_FuzzPlantedToken0123456789ab",
    "curl": "fuzzCurlPw3",
    "sshpass": "fuzzSshPw3",
    "dbpass": "fuzzDbPass3",
    "passphrase": "fuzzPhrase3",
}
SECRET_LOG = "\n".join([
    f"contact {SECRETS['email']}",
    f'{{"db_password": "correct {SECRETS["quoted"]}"}}',
    f"login with password {SECRETS['prose']} ok",
    "[CUPTI Activity] Dropped 85222 records. Current buffer size: 1048576 bytes",
    f"machine hub.example.org login alice password {SECRETS['netrc']}",
    "-----BEGIN PRIVATE KEY-----", SECRETS["pem"], SECRETS["pem_short"], "-----END PRIVATE KEY-----",
    f"export HF_TOKEN={SECRETS['hf']}",
    f"curl -u ops:{SECRETS['curl']} https://hub.example.org/upload",
    f"sshpass -p {SECRETS['sshpass']} scp out.tar node01:",
    f"DB_PASS={SECRETS['dbpass']} python train.py",
    f"Enter key passphrase: {SECRETS['passphrase']}",
]) + "\n"


def _job(folder: Path, sbatch: str | None = None, train: str | bytes | None = None,
         extra: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "job.sbatch").write_text(sbatch if sbatch is not None else SBATCH.format(extra=extra))
    data = TRAIN if train is None else train
    (folder / "train.py").write_bytes(data if isinstance(data, bytes) else data.encode())
    return folder


def _fifo(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() or path.is_symlink():
        path.unlink()
    os.mkfifo(path)


def _link(path: Path, target: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() or path.is_symlink():
        path.unlink()
    path.symlink_to(target)


def _experiment(folder: Path) -> Path:
    exp = folder / "scorep_rank_0"
    (exp / "traces").mkdir(parents=True, exist_ok=True)
    (exp / "scorep.cfg").write_text("SCOREP_ENABLE_TRACING=true\nSCOREP_CUDA_ENABLE=kernel\n")
    (exp / "MANIFEST.md").write_text("# Score-P\n\n- explicitly set:\n\n        SCOREP_ENABLE_TRACING\n")
    (exp / "traces.otf2").write_bytes(b"")
    return exp


def _alias_bomb(levels: int = 9) -> str:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return "\n".join(lines) + f"\nfp16: *a{levels - 1}\nload_best_model_at_end: *a{levels - 1}\n"


def _random_bytes(rng: random.Random, n: int) -> bytes:
    return bytes(rng.getrandbits(8) for _ in range(n))


def _shell_soup(rng: random.Random, n: int) -> str:
    """Random shell-ish text: quotes, expansions, heredocs, case, arrays, unbalanced everything."""
    atoms = ["${", "}", "$(", ")", "`", "'", '"', "\\", "$((", "))", "<<EOF\n", "EOF\n", "case x in", "esac",
             "if [[ ", " ]]; then", "fi", "for i in 1 2; do", "done", "A=(", ")", "${A[@]}", "${#A[@]}",
             "export ", "X=$X$X", " ", "\n", ";", "&&", "||", "|", "python -m scorep ", "train.py", "${X:-",
             "\x00", "é", "\r\n", "$'\\x41'", "~", "*", "?", "[", "]", "#", "{a,b}"]
    return "".join(rng.choice(atoms) for _ in range(n))


def make_corpus(root: Path, seed: int = 0) -> dict[str, Path]:
    rng = random.Random(seed)
    out: dict[str, Path] = {}

    def add(name: str, build: Callable[[Path], object]) -> None:
        folder = root / name
        build(folder)
        out[name] = folder

    add("doubling", lambda f: _job(f, "#!/bin/bash\nX=0123456789\n" + 'X="$X$X"\n' * 60
                                   + "export SCOREP_EXPERIMENT_DIRECTORY=$X\npython -m scorep --cuda train.py\n"))
    add("deep-expansion", lambda f: _job(f, "#!/bin/bash\nexport SCOREP_TOTAL_MEMORY=" + "${M:-" * 1000 + "4G"
                                         + "}" * 1000 + "\npython -m scorep --cuda train.py\n"))
    add("nested-if", lambda f: _job(f, "#!/bin/bash\n" + "if true; then\n" * 3000
                                    + "python -m scorep --cuda train.py\n" + "fi\n" * 3000))
    add("alias-bomb", lambda f: (_job(f, extra="config.yaml"), (f / "config.yaml").write_text(_alias_bomb())))
    add("huge-train", lambda f: _job(f, train="import torch\n" + "x = [1, 2, 3, 4, 5, 6, 7, 8]\n" * 160_000))
    add("fifo-job", lambda f: (_job(f), _fifo(f / "job.sbatch")))
    add("fifo-train", lambda f: (_job(f), _fifo(f / "train.py")))
    add("fifo-config", lambda f: (_job(f, extra="args.json"), _fifo(f / "args.json")))
    add("devzero-train", lambda f: (_job(f), _link(f / "train.py", "/dev/zero")))
    add("symlink-loop", lambda f: (_job(f), _link(f / "train.py", "train.py")))
    add("fifo-experiment", lambda f: (_job(f), _experiment(f), _fifo(f / "scorep_rank_0" / "scorep.cfg"),
                                      _fifo(f / "scorep_rank_0" / "MANIFEST.md"),
                                      _fifo(f / "scorep_rank_0" / "traces.def"),
                                      _fifo(f / "scorep_rank_0" / "traces" / "0.evt"),
                                      _fifo(f / "slurm-1.out")))
    add("devzero-experiment", lambda f: (_job(f), _experiment(f),
                                         _link(f / "scorep_rank_0" / "scorep.cfg", "/dev/zero"),
                                         _link(f / "train.log", "/dev/zero")))
    add("binary-garbage", lambda f: _job(f, _random_bytes(rng, 4096).decode("latin-1"), _random_bytes(rng, 4096)))
    add("shell-soup", lambda f: _job(f, "#!/bin/bash\n" + _shell_soup(rng, 3000)))
    add("secrets", lambda f: (_job(f), (f / "slurm-4242.out").write_text(SECRET_LOG)))
    add("state-is-a-file", lambda f: (_job(f), (f / ".gpu-doctor").write_text("not a folder\n")))
    add("journal-symlink", lambda f: (_job(f), (f / ".gpu-doctor").mkdir(),
                                      _link(f / ".gpu-doctor" / "journal.jsonl", str(root / "outside.txt"))))
    return out
