"""Node remedies: all manual. gpu-doctor never touches a driver or a node's services;
it prints the exact steps (`gpu-doctor explain GPU003` shows them)."""

from __future__ import annotations

from doctor.registry import manual_remedy

WARMUP = """\
for attempt in $(seq 1 30); do
    if python -c "import torch; torch.zeros(1).cuda()" 2>/dev/null; then
        echo "CUDA runtime ready after $attempt attempt(s)"; break
    fi
    echo "CUDA runtime not ready (attempt $attempt/30), sleeping 10 s"; sleep 10
done"""

manual_remedy(
    "node-cuda-warmup",
    "Warm CUDA up once, outside Score-P, before the instrumented run",
    [
        "In the job script, before the first `python -m scorep ...` line, insert this loop "
        "(it uses try/except semantics: the exit status of a real CUDA op, never is_available()):",
        *("    " + line for line in WARMUP.splitlines()),  # one step: the loop, as a code block
        "Run it with the job's own python and without LD_PRELOAD/Score-P in the environment; "
        "every later process (also the instrumented ranks) then finds the runtime initialised.",
        "`gpu-doctor fix` can insert it for you (launcher check LNC002).",
    ],
)

manual_remedy(
    "node-exclude",
    "Keep jobs off a node whose CUDA runtime never gets ready",
    [
        "Add to the job script header: #SBATCH --exclude=<host> (the host named in the finding),",
        "or for one submission: sbatch --exclude=<host> job.sh",
        "Report the node to the admins: `scontrol show node <host>`; an admin can drain it with",
        "  scontrol update nodename=<host> state=drain reason=\"CUDA runtime not ready (gpu-doctor GPU003)\"",
        "and bring it back after a fix with: scontrol update nodename=<host> state=resume",
    ],
)

manual_remedy(
    "node-fabric-manager",
    "Check the NVSwitch fabric manager",
    [
        "nvidia-smi -q | grep -A 3 -i fabric        # State should read 'Completed', Status 'Success'",
        "systemctl status nvidia-fabricmanager     # must be active (running)",
        "sudo systemctl restart nvidia-fabricmanager",
        "less /var/log/fabricmanager.log            # look for errors after the restart",
        "The fabric manager's version must equal the driver's (`nvidia-smi` shows the driver version).",
        "While the fabric is 'In Progress' CUDA answers 802 (system not ready); wait, then re-run gpu-doctor.",
    ],
)

manual_remedy(
    "node-driver",
    "Check the NVIDIA driver on this node",
    [
        "nvidia-smi                                 # does the driver answer? how many GPUs?",
        "lsmod | grep nvidia                        # is the kernel module loaded?",
        "sudo dmesg | grep -iE 'nvrm|xid'            # driver errors, Xid 79 = GPU fell off the bus",
        "cat /proc/driver/nvidia/version            # the kernel module's version",
        "If the module is missing or a GPU is lost: drain the node and ask the admins to reload the "
        "driver or reboot.",
        "A CUDA runtime newer than the driver supports fails with 35 (insufficient driver): use a "
        "torch/CUDA build not newer than the CUDA version `nvidia-smi` shows.",
    ],
)

manual_remedy(
    "node-cuda-libs",
    "Load the driver's own libcuda, not a stub or cuda-compat copy",
    [
        "ldconfig -p | grep -E 'libcuda.so|libnvidia-ml'     # the driver's libraries",
        "echo $LD_LIBRARY_PATH | tr : '\\n'                     # look for .../stubs or cuda-compat folders",
        "Remove any `.../lib64/stubs` folder from LD_LIBRARY_PATH (error 34 stub library).",
        "Remove a cuda-compat folder if the GPU or driver does not support forward compatibility "
        "(errors 803, 804).",
        "Then re-run: gpu-doctor --check-only --playbook node",
    ],
)
