#!/bin/bash
# gpu-doctor's recording shim: every command that starts or shapes ranks is this script under
# that command's name. It records argv, cwd and environment (record.sh), then does what the real
# command would do for the script to go on: srun/mpirun run their task command once per simulated
# task, container wrappers and `torchrun --no-python` run the command inside, Python never runs.
# shellcheck disable=SC2034
set -u
shopt -s extglob
source "$GD_BIN/record.sh"
tool=${0##*/}
self=$0
[[ $self == "$GD_BIN"/* ]] && self=$tool  # argv[0] as the script wrote it
argv=("$@")
max=${GD_MAX_TASKS:-4}

split() {  # own words of "$tool" before its command: $1 = options taking a value (|a|b|)
  local i=0 a
  while (( i < ${#argv[@]} )); do
    a=${argv[i]}
    if [[ $a == -- ]]; then i=$((i + 1)); break; fi
    [[ $a != -* ]] && break
    if [[ $a != *=* && $1 == *"|$a|"* ]]; then i=$((i + 2)); else i=$((i + 1)); fi
  done
  own=$i
}

opt() {  # the value of option $1 (or $2) among the tool's own words, else $3
  local i a
  for (( i = 0; i < own; i++ )); do
    a=${argv[i]}
    for name in "$1" "$2"; do
      [[ -z $name ]] && continue
      if [[ $a == "$name" ]]; then echo "${argv[i+1]-}"; return; fi
      if [[ $a == "$name="* ]]; then echo "${a#*=}"; return; fi
      if [[ ${#name} == 2 && $a == "$name"[0-9]* ]]; then echo "${a:2}"; return; fi
    done
  done
  echo "$3"
}

tasks() {  # run the command after the own words once per simulated task; $1 = task count
  local n=$1 per=$2 p k
  local -a cmd=("${argv[@]:own}")
  (( ${#cmd[@]} )) || return 0
  (( n > max )) && n=$max
  for (( p = 0; p < n; p++ )); do
    (
      export GD_PARENT=$GD_ID GD_TASK="$GD_ID:$p"
      task_env "$p" "$per"
      "${cmd[@]}"
    ) <"${GD_STDIN:-/dev/zero}" || true
  done
}

SRUN_VALUE="|-n|-N|-c|-p|-t|-o|-e|-i|-J|-w|-x|-A|-q|-G|-m|-D|-d|-C|-L|-W|-T|-S|--ntasks|--nodes|--cpus-per-task|\
--partition|--time|--output|--error|--input|--job-name|--nodelist|--exclude|--account|--qos|--gpus|--gres|--mem|\
--ntasks-per-node|--gpus-per-node|--gpus-per-task|--cpu-bind|--distribution|--chdir|--dependency|--constraint|--mpi|\
--export|--het-group|--mem-per-cpu|--mem-per-gpu|--cpus-per-gpu|--signal|--reservation|--container-image|\
--container-mounts|--container-workdir|--container-name|"
MPI_VALUE="|-np|-n|-c|--np|-N|-npernode|--npernode|-ppn|--map-by|--bind-to|-x|-H|--host|-hostfile|--hostfile|\
-machinefile|--rankfile|-mca|--mca|-wdir|--wdir|--rank-by|-f|-hosts|--report-bindings|"
TORCHRUN_VALUE="|--nproc_per_node|--nproc-per-node|--nnodes|--node_rank|--node-rank|--master_addr|--master-addr|\
--master_port|--master-port|--rdzv_backend|--rdzv-backend|--rdzv_endpoint|--rdzv-endpoint|--rdzv_id|--rdzv-id|\
--rdzv_conf|--rdzv-conf|--max_restarts|--max-restarts|--monitor_interval|--log_dir|--log-dir|-r|--redirects|-t|--tee|\
--local_addr|--role|--start_method|"

case $tool in
  srun)
    split "$SRUN_VALUE"
    __gd_record srun "$(( own + 1 ))" "$self" "$@"
    nodes=$(opt -N --nodes "${SLURM_NNODES:-1}"); nodes=${nodes%%-*}
    per=$(opt --ntasks-per-node "" "${SLURM_NTASKS_PER_NODE:-}")
    n=$(opt -n --ntasks "")
    [[ -z $n && -n $per ]] && n=$(( nodes * per ))
    [[ -z $n ]] && n=${SLURM_NTASKS:-$nodes}
    [[ $n =~ ^[0-9]+$ ]] || n=1
    [[ -z $per || ! $per =~ ^[0-9]+$ ]] && per=$(( (n + nodes - 1) / (nodes > 0 ? nodes : 1) ))
    export_opt=$(opt --export "" "")
    task_env() {
      if [[ -n $export_opt ]]; then
        local item keep=0 IFS=,
        for item in $export_opt; do [[ $item == ALL || $item == all ]] && keep=1; done
        if (( ! keep )); then
          local name
          for name in $("$GD_BIN/env" | "$GD_BIN/sed" -n 's/^\([A-Za-z_][A-Za-z0-9_]*\)=.*/\1/p'); do
            case $name in SLURM_*|GD_*|__GD_*|PATH|BASH_ENV|HOME|PWD) ;; *) unset "$name";; esac
          done
          for item in $export_opt; do
            [[ $item != *=* && $item =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] && [[ -n ${!item+x} ]] && export "${item?}"
          done
        fi
        for item in $export_opt; do [[ $item == [A-Za-z_]*=* ]] && export "${item%%=*}=${item#*=}"; done
      fi
      export SLURM_PROCID=$1 SLURM_LOCALID=$(( $1 % $2 )) SLURM_NODEID=$(( $1 / $2 )) SLURM_STEP_NUM_TASKS=$n \
             SLURM_NTASKS=$n SLURM_STEP_ID=0
    }
    tasks "$n" "$per"
    ;;
  mpirun|mpiexec|orterun)
    split "$MPI_VALUE"
    __gd_record "$tool" "$(( own + 1 ))" "$self" "$@"
    n=$(opt -np -n "$(opt --np -c "${SLURM_NTASKS:-1}")")
    [[ $n =~ ^[0-9]+$ ]] || n=1
    task_env() {
      local i
      for (( i = 0; i < own; i++ )); do
        case ${argv[i]} in
          -x) [[ ${argv[i+1]-} == *=* ]] && export "${argv[i+1]%%=*}=${argv[i+1]#*=}";;
          -genv|-env) export "${argv[i+1]}=${argv[i+2]-}"; i=$((i + 2));;
        esac
      done
      export OMPI_COMM_WORLD_RANK=$1 OMPI_COMM_WORLD_LOCAL_RANK=$1 OMPI_COMM_WORLD_SIZE=$n PMI_RANK=$1 PMI_SIZE=$n
    }
    tasks "$n" "$n"
    ;;
  torchrun|python*|pypy*)
    if [[ $tool != torchrun ]]; then
      i=0
      while (( i < ${#argv[@]} )); do
        a=${argv[i]}
        if [[ $a == -m && ${argv[i+1]-} == torch.distributed.@(run|launch) ]]; then i=$((i + 2)); break; fi
        [[ $a == -[XW] ]] && { i=$((i + 2)); continue; }
        [[ $a == -* && $a != -c && $a != -m ]] && { i=$((i + 1)); continue; }
        i=-1; break
      done
      if (( i < 0 )); then __gd_record "$tool" 1 "$self" "$@"; exit 0; fi  # Python never runs
      argv=("${argv[@]:i}")
    fi
    split "$TORCHRUN_VALUE"
    __gd_record "$tool" "$(( own + 1 + $# - ${#argv[@]} ))" "$self" "$@"
    nopy=0
    for (( i = 0; i < own; i++ )); do [[ ${argv[i]} == --no[-_]python ]] && nopy=1; done
    (( nopy )) || exit 0
    n=$(opt --nproc_per_node --nproc-per-node 1)
    [[ $n =~ ^[0-9]+$ ]] || n=1
    task_env() {
      export RANK=$1 LOCAL_RANK=$1 WORLD_SIZE=$n LOCAL_WORLD_SIZE=$n MASTER_ADDR=${MASTER_ADDR:-127.0.0.1} \
             MASTER_PORT=${MASTER_PORT:-29500} GROUP_RANK=0 ROLE_RANK=$1
    }
    tasks "$n" "$n"
    ;;
  singularity|apptainer|podman|docker|shifter|enroot)
    i=0
    [[ $tool == @(singularity|apptainer|podman|docker) && ${argv[0]-} == @(exec|run) ]] && i=1
    [[ $tool == enroot && ${argv[0]-} == @(start|exec) ]] && i=1
    while (( i < ${#argv[@]} )) && [[ ${argv[i]} == -* ]]; do
      a=${argv[i]}
      case $a in
        *=*) i=$((i + 1));;
        -B|--bind|--env|--env-file|-H|--home|-W|--workdir|--overlay|-o|--pwd|-v|--volume|-e|-w|--name|--network|\
--gpus|--shm-size|--ipc|-u|--user|--mount|--entrypoint|--device|--image|-m|--rw|--root|--security-opt|--runtime)
          i=$((i + 2));;
        *) i=$((i + 1));;
      esac
    done
    [[ $tool != shifter ]] && i=$((i + 1))  # the image (shifter names it with --image)
    own=$i
    __gd_record "$tool" "$(( own + 1 ))" "$self" "$@"
    task_env() { :; }
    tasks 1 1
    ;;
  scontrol)
    __gd_record scontrol 1 "$self" "$@"
    if [[ ${1-} == show && ${2-} == hostnames ]]; then
      for (( i = 0; i < ${SLURM_NNODES:-1}; i++ )); do echo "gdnode$i"; done
    fi
    ;;
  hostname) echo "gdnode${SLURM_NODEID:-0}";;
  nproc) echo "${SLURM_CPUS_ON_NODE:-8}";;
  nvidia-smi)
    __gd_record nvidia-smi 1 "$self" "$@"
    for (( i = 0; i < ${GD_GPUS:-4}; i++ )); do
      case " $* " in
        *" -L "*) echo "GPU $i: NVIDIA GPU (UUID: GPU-0000000$i)";;
        *--query-gpu*) echo "$i";;
      esac
    done
    ;;
  *)
    __gd_record "$tool" 1 "$self" "$@"
    ;;
esac
exit 0
