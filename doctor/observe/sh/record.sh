# shellcheck shell=bash
# One record per recorded command: NUL-separated fields, then the environment (env -0).
# Fields: format, tool, how many leading argv words are the tool's own (the rest is the
# command it runs), the file:line it is written at, cwd, the record that ran it, the task
# it runs in, backgrounded (stdin is /dev/null: bash gives `cmd &` that), argc, argv...
__gd_record() {
  local tool=$1 own=$2 bg=0 f
  shift 2
  [[ /proc/self/fd/0 -ef /dev/null ]] && bg=1
  f="$GD_REC/${EPOCHREALTIME/[.,]/}-$$-$RANDOM"
  {
    printf '%s\0' gd1 "$tool" "$own" "${__GD_AT-?}" "$PWD" "${GD_PARENT-}" "${GD_TASK-}" "$bg" "$#" "$@"
    "$GD_BIN/env" -0
  } > "$f.rec" 2>/dev/null || true
  GD_ID=${f##*/}
  return 0
}
