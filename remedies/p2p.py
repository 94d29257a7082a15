"""Remedies for unhealthy GPU peer-to-peer links (P2P001, P2P002).

All are manual for now: exact job-script lines and code. Every one routes data
around the bad link (through host memory, or onto GPUs that do not share it)
or keeps the job off the node; none repairs the link itself, which is a
hardware/driver matter for the node's administrators.
"""

from __future__ import annotations

from doctor.registry import manual_remedy

manual_remedy(
    "p2p-nccl-disable", "NCCL jobs: turn off NCCL's peer-to-peer transport",
    steps=(
        "In the job script, before the launch line, add:",
        "    export NCCL_P2P_DISABLE=1",
        "NCCL then moves data through host shared memory instead of peer copies: slower, but the "
        "bytes no longer cross the bad link.",
        "If only PCIe peer copies are bad and NVLink is healthy, keep NVLink with:",
        "    export NCCL_P2P_LEVEL=NVL",
        "Check NCCL's data with nccl-tests: all_reduce_perf -b 8 -e 256M -g <GPUs> -c 1 "
        "(-c 1 checks the results; errors show in the #wrong column).",
        "NCCL_P2P_DISABLE does not affect tensor.to(other_gpu) copies (device_map): see "
        "p2p-host-staged-copy.",
    ),
)

manual_remedy(
    "p2p-device-map-single-gpu", "accelerate/transformers device_map: keep the model on one GPU",
    steps=(
        "Load the model on one GPU so no layer output crosses GPUs:",
        "    model = AutoModelForCausalLM.from_pretrained(name, device_map=\"cuda:0\")",
        "(equivalently device_map={\"\": 0}). Pick a GPU that is not part of the bad pair.",
        "If the model does not fit on one GPU, use p2p-visible-devices or p2p-host-staged-copy.",
    ),
)

manual_remedy(
    "p2p-visible-devices", "device_map=\"auto\": leave one GPU of the bad pair out",
    steps=(
        "Hide one GPU of the bad pair before Python starts, so device_map=\"auto\" spreads the model "
        "only over GPUs whose links verified clean (P2P002). E.g. for a bad pair 0<->1 on a 4-GPU node:",
        "    export CUDA_VISIBLE_DEVICES=0,2,3",
        "Or keep every GPU visible and give the bad one no layers:",
        "    model = AutoModelForCausalLM.from_pretrained(name, device_map=\"auto\", "
        "max_memory={0: \"75GiB\", 1: \"0GiB\", 2: \"75GiB\", 3: \"75GiB\"})",
        "Re-check: gpu-doctor --check-only --playbook p2p --level 2",
    ),
)

manual_remedy(
    "p2p-host-staged-copy", "Stage cross-GPU copies through host memory",
    steps=(
        "Where your code moves tensors between GPUs, go through the host for the bad pair:",
        "    BAD_PAIRS = {(0, 1), (1, 0)}  # from P2P002",
        "    def to_device(tensor, dst):",
        "        dst = torch.device(dst)",
        "        if tensor.is_cuda and dst.type == \"cuda\" and (tensor.device.index, dst.index) in BAD_PAIRS:",
        "            return tensor.cpu().to(dst)  # host-staged: slower, but never crosses the bad link",
        "        return tensor.to(dst)",
        "For accelerate's device_map hooks, which call tensor.to(device) themselves, prefer "
        "p2p-visible-devices or p2p-device-map-single-gpu.",
    ),
)

manual_remedy(
    "p2p-exclude-node", "Keep jobs off this node until its GPU links are repaired",
    steps=(
        "In the job script:",
        "    #SBATCH --exclude=<host>",
        "Administrators: drain the node and report the bad pair (P2P002 names it):",
        "    scontrol update nodename=<host> state=drain reason=\"gpu-doctor P2P002: corrupt peer copies\"",
        "Then check cabling/NVLink (nvidia-smi nvlink -s, nvidia-smi nvlink -e for error counters), "
        "PCIe ACS settings, and the driver; re-run gpu-doctor --check-only --playbook p2p --level 2.",
    ),
)

manual_remedy(
    "p2p-verify-active", "Prove the bytes: run the active peer-copy test",
    steps=(
        "NVML only reports what the driver believes; check the data itself on this node:",
        "    gpu-doctor --check-only --playbook p2p --level 2",
        "It copies a patterned buffer between every GPU pair and compares it bit for bit with a "
        "host-staged copy (P2P002). Size per pair: --p2p-size 256M (or GPU_DOCTOR_P2P_SIZE).",
    ),
)

manual_remedy(
    "p2p-driver-disabled", "P2P disabled by the driver: confirm it is on purpose",
    steps=(
        "NVML says peer-to-peer is disabled by a driver registry key. CUDA and NCCL then copy "
        "through host memory: correct, but slower.",
        "See what is set: grep RegistryDwords /proc/driver/nvidia/params; "
        "grep -r NVreg_RegistryDwords /etc/modprobe.d/",
        "If an administrator disabled P2P because of a bad link, leave it so; otherwise ask them "
        "to remove the key and reload the driver.",
    ),
)
