#!/bin/bash
# `module load NAME...` without Lmod: find NAME's modulefile (Lua or Tcl) in MODULEPATH and in the
# job folder, and print the shell lines that its setenv/prepend_path/append_path would run. A module
# it cannot find is recorded as module-missing. Only literal values are read.
# shellcheck disable=SC2016
set -u
source "$GD_BIN/record.sh"
case ${1-} in
  load|add|try-load|try-add) shift;;
  use) shift; [[ ${1-} == -a || ${1-} == --append ]] && shift
       for d in "$@"; do printf 'export MODULEPATH=%q${MODULEPATH:+:$MODULEPATH}\n' "$d"; done; exit 0;;
  *) exit 0;;
esac
find_file() {
  local name=$1 dir cand
  local IFS=:
  for dir in ${MODULEPATH-} "$GD_ROOT" "$GD_ROOT/modulefiles" "$GD_ROOT/modules" "$PWD" "$PWD/modulefiles"; do
    [[ -n $dir && -d $dir ]] || continue
    for cand in "$dir/$name.lua" "$dir/$name"; do
      [[ -f $cand ]] && { echo "$cand"; return 0; }
    done
    if [[ -d $dir/$name ]]; then
      for cand in "$dir/$name/default" "$dir/$name/default.lua"; do [[ -f $cand ]] && { echo "$cand"; return 0; }; done
      cand=$(ls "$dir/$name" 2>/dev/null | sort -V | tail -n 1)
      [[ -n $cand && -f $dir/$name/$cand ]] && { echo "$dir/$name/$cand"; return 0; }
    fi
  done
  return 1
}
q() { printf '%q' "$1"; }
for name in "$@"; do
  [[ $name == -* ]] && continue
  file=$(find_file "$name") || { __gd_record module-missing 1 module load "$name"; continue; }
  while IFS= read -r line || [[ -n $line ]]; do
    line=${line%%--*}
    if [[ $line =~ ^[[:space:]]*(setenv|pushenv)[[:space:]]*\([[:space:]]*[\"\']([A-Za-z_][A-Za-z0-9_]*)[\"\'][[:space:]]*,[[:space:]]*[\"\']([^\"\']*)[\"\'] ]]; then
      echo "export ${BASH_REMATCH[2]}=$(q "${BASH_REMATCH[3]}")"
    elif [[ $line =~ ^[[:space:]]*(prepend_path|append_path)[[:space:]]*\([[:space:]]*[\"\']([A-Za-z_][A-Za-z0-9_]*)[\"\'][[:space:]]*,[[:space:]]*[\"\']([^\"\']*)[\"\'] ]]; then
      v=$(q "${BASH_REMATCH[3]}"); n=${BASH_REMATCH[2]}
      if [[ ${BASH_REMATCH[1]} == prepend_path ]]; then echo "export $n=$v\${$n:+:\$$n}"; else echo "export $n=\${$n:+\$$n:}$v"; fi
    elif [[ $line =~ ^[[:space:]]*setenv[[:space:]]+([A-Za-z_][A-Za-z0-9_]*)[[:space:]]+\"?([^\"[:space:]]*)\"? ]]; then
      echo "export ${BASH_REMATCH[1]}=$(q "${BASH_REMATCH[2]}")"
    elif [[ $line =~ ^[[:space:]]*(prepend-path|append-path)[[:space:]]+([A-Za-z_][A-Za-z0-9_]*)[[:space:]]+\"?([^\"[:space:]]*)\"? ]]; then
      v=$(q "${BASH_REMATCH[3]}"); n=${BASH_REMATCH[2]}
      if [[ ${BASH_REMATCH[1]} == prepend-path ]]; then echo "export $n=$v\${$n:+:\$$n}"; else echo "export $n=\${$n:+\$$n:}$v"; fi
    fi
  done < "$file"
done
exit 0
