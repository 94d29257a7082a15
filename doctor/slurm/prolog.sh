#!/bin/sh
# gpu-doctor as a Slurm Prolog: refuse a node whose GPUs are not ready, before the job lands.
#
# slurm.conf:   Prolog=/path/to/prolog.sh
#               PrologFlags=Alloc          # run at allocation, not at the first step
#               PrologEpilogTimeout=120    # the gate's --timeout must stay well below this
#
# Slurm runs the Prolog as root with no PATH and with SLURM_JOB_ID, SLURM_JOB_USER,
# SLURMD_NODENAME and, for GPU jobs, SLURM_JOB_GPUS / CUDA_VISIBLE_DEVICES (which become
# the GPUs the gate expects). The gate reads node state only: no user file, no user code.
#
# Settings come from a root-owned file, /etc/gpu-doctor/prolog.conf (or
# $GPU_DOCTOR_PROLOG_CONF), in shell syntax; all are optional:
#   GPU_DOCTOR=/opt/gpu-doctor/.venv/bin/gpu-doctor   # default: gpu-doctor on the PATH below
#   VERDICT_DIR=/var/log/gpu-doctor                    # JSON + reason line per job, and per node
#   TIMEOUT=30                                         # seconds, the gate's global budget
#   FAIL_ON=error                                      # or warning
#   EXTRA_ARGS="--expect-gpus 4"
#   HARD_LIMIT=60                                      # seconds; default TIMEOUT + 30 (see below)
#   PROMETHEUS_FILE=/var/lib/node_exporter/textfile/gpu_doctor.prom   # the verdict for Prometheus
#
# Exit status: 0 lets the job run; 1 (only for a node fault found by the gate) makes Slurm
# drain the node with Reason="Prolog error" and requeue-hold a batch job. The failing check
# IDs are in $VERDICT_DIR/node-$SLURMD_NODENAME.txt and the per-job JSON. If gpu-doctor itself
# cannot run (exit 2: not installed, bad config), the node is NOT drained: that is our fault,
# not the node's; the reason goes to the verdict folder.
#
# The gate keeps to TIMEOUT by itself (each probe runs in a child it kills). HARD_LIMIT is the
# backstop, enforced with coreutils `timeout`: a gate still running then (stuck in a driver call
# no signal ends) is killed and the node drained with that reason written down, instead of Slurm
# killing the whole Prolog at PrologEpilogTimeout without one. Keep PrologEpilogTimeout above
# HARD_LIMIT + 10.

PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH
umask 022

conf=${GPU_DOCTOR_PROLOG_CONF:-/etc/gpu-doctor/prolog.conf}
if [ -f "$conf" ] && [ ! -L "$conf" ]; then
    # Only a root-owned file that nobody else can write is trusted (we run as root).
    owner=$(stat -c %u "$conf" 2>/dev/null)
    perms=$(stat -c %A "$conf" 2>/dev/null)
    case "$perms" in
        ?????w????|????????w?) trusted=no ;;
        *) trusted=yes ;;
    esac
    if [ "$owner" = 0 ] && [ "$trusted" = yes ]; then
        . "$conf"
    else
        echo "gpu-doctor prolog: ignoring $conf (not root-owned or writable by others)" >&2
    fi
fi

GPU_DOCTOR=${GPU_DOCTOR:-gpu-doctor}
VERDICT_DIR=${VERDICT_DIR:-/var/log/gpu-doctor}
TIMEOUT=${TIMEOUT:-30}
FAIL_ON=${FAIL_ON:-error}
case $TIMEOUT in
    ''|*[!0-9]*) hard_default=120 ;;
    *) hard_default=$((TIMEOUT + 30)) ;;
esac
HARD_LIMIT=${HARD_LIMIT:-$hard_default}
limit=""
if command -v timeout >/dev/null 2>&1; then
    limit="timeout -k 5 $HARD_LIMIT"
fi
node=${SLURMD_NODENAME:-$(hostname -s)}
job=${SLURM_JOB_ID:-nojob}

mkdir -p "$VERDICT_DIR" 2>/dev/null
# The Prologs of a multi-node job run at once, one per node, on a shared VERDICT_DIR: each
# writes its own files first, so the node-$node.* copies are always that node's verdict;
# the per-job files then hold the last node's.
json="$VERDICT_DIR/job-$job.json.$node"
line="$VERDICT_DIR/job-$job.txt.$node"
rm -f "$VERDICT_DIR/job-$job.json"   # a requeued job runs the Prolog again: its verdict is this run's, or none
publish() {
    # Each node's own verdict stays as job-<job>.<node>.json: `gpu-doctor fleet` reads every node's runs.
    cp "$json" "$VERDICT_DIR/job-$job.$node.json" 2>/dev/null
    mv -f "$json" "$VERDICT_DIR/job-$job.json" 2>/dev/null
    mv -f "$line" "$VERDICT_DIR/job-$job.txt" 2>/dev/null
}

if [ -n "${PROMETHEUS_FILE:-}" ]; then
    set -- --prometheus "$PROMETHEUS_FILE"   # node_exporter's textfile collector (replaced atomically)
else
    set --
fi
# shellcheck disable=SC2086
$limit "$GPU_DOCTOR" --check-only --playbook prologue --timeout "$TIMEOUT" --fail-on "$FAIL_ON" \
    --json-file "$json" --quiet "$@" $EXTRA_ARGS >"$line" 2>&1 </dev/null
rc=$?

case $rc in
    0)
        publish
        exit 0 ;;
    1)
        # A node fault: keep the reason where the admin looks, and let Slurm drain the node.
        cp "$line" "$VERDICT_DIR/node-$node.txt" 2>/dev/null
        cp "$json" "$VERDICT_DIR/node-$node.json" 2>/dev/null
        cat "$line" >&2
        publish
        exit 1 ;;
    124|137)
        # Killed by HARD_LIMIT: no verdict, most likely a driver call that never returns.
        echo "gpu-doctor prolog: FAIL on $node: the gate did not finish within $HARD_LIMIT s" \
            "(exit $rc; a driver call that never returns?); node drained" >>"$line"
        cp "$line" "$VERDICT_DIR/node-$node.txt" 2>/dev/null
        rm -f "$VERDICT_DIR/node-$node.json" "$json"
        cat "$line" >&2
        publish
        exit 1 ;;
    *)
        echo "gpu-doctor prolog: the gate could not run (exit $rc); node not drained" >>"$line"
        rm -f "$json"
        publish
        exit 0 ;;
esac
