# gpu-doctor's observed reading: read by every bash the job starts (BASH_ENV), before the script.
# It records, for each command, the file:line it is written at (exported as __GD_AT, which the
# recording shims read), and for each watched variable the file:line of the command that last
# changed it (__GD_SITES). Nothing here prints; every function returns 0 and tolerates set -eu.
# shellcheck shell=bash disable=SC2034,SC2154

declare -gA __gd_last=() __gd_site=()
__GD_PREV=
__gd_pwd0=$PWD  # a script started by a relative name is named from here
__gd_cbase=${__GD_AT%\~}  # for `bash -c '...'`: the line of the command that started it
export __GD_AT="${__GD_AT-}" __GD_SITES="${__GD_SITES-}"

if [[ -n ${__GD_SITES} ]]; then  # what the calling shell knew: the variables it set, and where
  while IFS='=' read -r -d $'\x1f' __gd_n __gd_w; do
    [[ -n $__gd_n ]] && __gd_site[$__gd_n]=$__gd_w
  done <<< "${__GD_SITES}"$'\x1f'
fi

__gd_watch() {  # which watched variables changed since the last command: the last command did it
  local n v changed=
  for n in ${!SCOREP_@} RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT PYTHONPATH \
           CUDA_VISIBLE_DEVICES KINETO_USE_DAEMON SLURM_PROCID; do
    v=${!n-$'\x01'}
    if [[ ${__gd_last[$n]-$'\x02'} != "$v" ]]; then
      [[ -n $__GD_PREV ]] && __gd_site[$n]=$__GD_PREV
      __gd_last[$n]=$v
      changed=1
    fi
  done
  if [[ -n $changed ]]; then
    __GD_SITES=
    for n in "${!__gd_site[@]}"; do __GD_SITES+="$n=${__gd_site[$n]}"$'\x1f'; done
  fi
  return 0
}
__gd_watch  # what this shell starts with is inherited, not set here

__gd_debug() {
  [[ ${BASH_SOURCE[1]-} == "$GD_BIN"/* ]] && return 0  # our own functions (module, source)
  __gd_watch
  if [[ $PATH != "$GD_BIN" ]]; then __GD_USER_PATH=$PATH; PATH=$GD_BIN; fi  # every lookup meets a shim
  set +eu  # the cluster has what the sandbox lacks ($SCRATCH, a writable /scratch): read on, as there
  __GD_AT="${BASH_SOURCE[1]-}"
  if [[ -z $__GD_AT && $__gd_cbase == *:* ]]; then  # a -c string: lines counted from its caller's, about
    __GD_AT="${__gd_cbase%:*}:$(( ${__gd_cbase##*:} + ${BASH_LINENO[0]:-1} - 1 ))~"
  elif [[ $__GD_AT == /dev/fd/* || $__GD_AT == /proc/self/fd/* ]]; then
    __GD_AT=${__gd_fdsite:-?:0}  # `source <(...)`: the line that sources it
  else
    [[ $__GD_AT == /* ]] || __GD_AT=$__gd_pwd0/$__GD_AT
    __GD_AT+=":${BASH_LINENO[0]-0}"
  fi
  __GD_PREV=$__GD_AT
  return 0
}
set -T
# `"$_"` last: bash sets `$_` to the trap command's last word, so the script's own `$_` (`mkdir -p "$D" && cd "$_"`)
# is what it was before the trap ran
trap '__gd_debug "$_"' DEBUG

source "$GD_BIN/record.sh"

command_not_found_handle() {  # anything else: recorded, answered with success and no output
  __gd_record "${1##*/}" 1 "$@"
  return 0
}

module() {  # Lmod/Tcl modules without Lmod: the modulefile's setenv/prepend_path, read here
  local __gd_out
  __gd_record module 1 module "$@"
  __gd_out=$("$GD_BIN/module.sh" "$@") || true
  eval "$__gd_out"
  return 0
}
ml() {
  if [[ $# -eq 0 ]]; then module list; else case $1 in -*|load|add|unload|purge|list|avail|use|swap) module "$@";;
    *) module load "$@";; esac; fi
}

conda() {
  __gd_record conda 1 conda "$@"
  if [[ ${1-} == activate ]]; then export CONDA_DEFAULT_ENV=${2-base}; fi
  return 0
}

declare -gi __gd_sourcing=0
__gd_source() {  # a readable file is sourced for real; a missing one (an env's activate) is noted
  if [[ $# -gt 0 && ( -r $1 || $1 == /dev/fd/* || $1 == /proc/self/fd/* ) ]]; then
    [[ $1 == /dev/fd/* || $1 == /proc/self/fd/* ]] && __gd_fdsite=$__GD_AT
    if (( __gd_sourcing++ == 0 )); then  # the file's own declarations stay global, as at top level
      declare() { builtin declare -g "$@"; }
      typeset() { builtin declare -g "$@"; }
    fi
    builtin source "$@"
    local __gd_rc=$?
    if (( --__gd_sourcing == 0 )); then unset -f declare typeset; fi
    return $__gd_rc
  fi
  __gd_record source-missing 1 source "$@"
  [[ ${1-} == */activate || ${1-} == activate ]] && export VIRTUAL_ENV=${1%/bin/activate}
  return 0
}
source() { __gd_source "$@"; }
.() { __gd_source "$@"; }
