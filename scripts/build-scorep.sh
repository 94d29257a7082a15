#!/usr/bin/env bash
# Put real Score-P 8.4 and its Python bindings (scorep 4.5.1) where the tests find them.
#
#   scripts/build-scorep.sh [--use-existing] [VENV]        (default: .venv of this checkout)
#
# 0. With --use-existing, or when nothing is vendored: the Score-P already there (scorep-config on
#    PATH, e.g. a site's `module load scorep`, else the prefix VENV/scorep-prefix names) gets the
#    bindings built against it and is registered; steps 1-3 are skipped.
#
# 1. Checks the vendored files against SHA256SUMS (VENDOR, default ../shared/vendor from the repo).
# 2. Installs what Score-P needs from Debian: at run time `python -m scorep` links a small init
#    library with gcc against `scorep-config --libs` (-lpapi -lunwind -lbfd -lz), so the -dev
#    packages are needed, not only the shared libraries.
# 3. Score-P itself: the prebuilt /opt/scorep prefix when this is the OS and architecture it was
#    built on and its `scorep-config --version` runs; otherwise a build from the release source
#    into CACHE/scorep-8.4-<sha256 prefix>/ (CACHE default ~/.cache/gpu-doctor), reused once
#    finished (a `.complete` stamp marks a finished install).
# 4. `pip install --no-build-isolation scorep==4.5.1` into VENV with scorep-config on PATH, and
#    VENV/scorep-prefix naming the Score-P prefix (tests/scorep_real.py reads it).
#
# Exit 0 when Score-P works at the end (or there is none, nothing is vendored: the real-Score-P
# tests then skip with that reason); 1 when a hash does not match, the build fails, or
# --use-existing finds no working Score-P.
set -euo pipefail
use_existing=0
if [ "${1:-}" = --use-existing ]; then use_existing=1; shift; fi
repo="$(cd "$(dirname "$0")/.." && pwd)"
venv="$(cd "${1:-$repo/.venv}" && pwd)"
vendor="${VENDOR:-$repo/../shared/vendor}"
cache="${CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpu-doctor}"
source_tgz="scorep-8.4.tar.gz"
prebuilt_tgz="scorep-8.4-opt-scorep-debian12-x86_64.tar.gz"
prebuilt_prefix=/opt/scorep
bindings="scorep==4.5.1"
say() { echo "build-scorep: $*"; }

works() { "$1/bin/scorep-config" --version >/dev/null 2>&1 && "$1/bin/scorep-info" config-summary >/dev/null 2>&1; }

install_bindings() {  # install_bindings PREFIX: scorep==4.5.1 built against PREFIX, registered in VENV
  local prefix="$1"
  say "Score-P $("$prefix/bin/scorep-config" --version) at $prefix"
  export PATH="$prefix/bin:$PATH"
  if ! "$venv/bin/python" -c "import scorep, importlib.metadata as m; assert m.version('scorep') == '4.5.1'" \
       2>/dev/null || [ "$(cat "$venv/scorep-prefix" 2>/dev/null)" != "$prefix" ]; then
    # the bindings compile against this prefix: rebuild them when the prefix changed
    "$venv/bin/pip" install -q --no-build-isolation --force-reinstall --no-deps --no-cache-dir "$bindings" \
      2>&1 | grep -v "^WARNING: Location" || true
  fi
  "$venv/bin/python" -c "import scorep" || { say "$bindings did not install into $venv"; return 1; }
  echo "$prefix" > "$venv/scorep-prefix"
  say "bindings $bindings in $venv; $venv/scorep-prefix -> $prefix"
}

existing_prefix() {  # the Score-P already here: scorep-config on PATH, else the registered prefix
  local cfg prefix
  if cfg="$(command -v scorep-config)"; then
    prefix="$(cd "$(dirname "$cfg")/.." && pwd)"
    works "$prefix" && { echo "$prefix"; return 0; }
  fi
  prefix="$(cat "$venv/scorep-prefix" 2>/dev/null)" || return 1
  [ -n "$prefix" ] && works "$prefix" && echo "$prefix"
}

if [ "$use_existing" = 1 ] || [ ! -f "$vendor/$source_tgz" ] || [ ! -f "$vendor/SHA256SUMS" ]; then
  if prefix="$(existing_prefix)"; then
    [ "$use_existing" = 1 ] || say "no $source_tgz with SHA256SUMS in $vendor: using the Score-P already installed"
    install_bindings "$prefix" || exit 1
    exit 0
  fi
  if [ "$use_existing" = 1 ]; then
    say "--use-existing: no working scorep-config on PATH and no registered prefix in $venv/scorep-prefix"
    exit 1
  fi
  say "no $source_tgz with SHA256SUMS in $vendor and no Score-P on PATH: real-Score-P tests will skip"
  rm -f "$venv/scorep-prefix"
  exit 0
fi

hash_of() { awk -v f="$1" '$2 == f || $2 == "*" f {print $1}' "$vendor/SHA256SUMS"; }
verify() {  # verify FILE: its sha256 is the one SHA256SUMS lists
  local want got
  want="$(hash_of "$1")"
  [ -n "$want" ] || { say "$1 is not listed in $vendor/SHA256SUMS"; return 1; }
  got="$(sha256sum "$vendor/$1" | cut -d' ' -f1)"
  [ "$want" = "$got" ] || { say "$vendor/$1: sha256 $got, SHA256SUMS says $want"; return 1; }
}
verify "$source_tgz" || exit 1
source_hash="$(hash_of "$source_tgz")"

apt_install() {  # apt_install PKG...: the ones not installed yet
  local missing=()
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ "${#missing[@]}" -eq 0 ] && return 0
  command -v apt-get >/dev/null || { say "missing ${missing[*]} and no apt-get"; return 1; }
  say "apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=600 "${missing[@]}" >/dev/null \
    || { apt-get update -qq && apt-get install -y -qq --no-install-recommends \
           -o DPkg::Lock::Timeout=600 "${missing[@]}" >/dev/null; }
}
# Run time: gcc links the bindings' init library with -lpapi -lunwind -lbfd -lz (the -dev packages).
RUNTIME=(gcc libc6-dev libpapi-dev libunwind-dev binutils-dev zlib1g-dev libgomp1 libstdc++6)
BUILD=(g++ gfortran make bison flex libiberty-dev)

prebuilt_matches() {
  [ -f "$vendor/$prebuilt_tgz" ] || return 1
  [ "$(uname -m)" = x86_64 ] || return 1
  # shellcheck disable=SC1091
  (. /etc/os-release && [ "${ID:-}" = debian ] && [ "${VERSION_ID:-}" = 12 ]) || return 1
}

use_prebuilt() {
  local stamp="$prebuilt_prefix/.gpu-doctor-sha256" want
  verify "$prebuilt_tgz" || return 1
  want="$(hash_of "$prebuilt_tgz")"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && works "$prebuilt_prefix"; then
    say "reusing $prebuilt_prefix (unpacked from $prebuilt_tgz)"
    return 0
  fi
  if [ -e "$prebuilt_prefix" ] && ! [ -f "$stamp" ] && works "$prebuilt_prefix" \
     && [ "$("$prebuilt_prefix/bin/scorep-config" --version)" = 8.4 ]; then
    say "reusing Score-P 8.4 already at $prebuilt_prefix"
    return 0
  fi
  [ -w "$(dirname "$prebuilt_prefix")" ] || { say "cannot write $(dirname "$prebuilt_prefix")"; return 1; }
  local tmp
  tmp="$(mktemp -d "$(dirname "$prebuilt_prefix")/.scorep-unpack.XXXXXX")"
  tar xzf "$vendor/$prebuilt_tgz" -C "$tmp"
  rm -rf "$prebuilt_prefix.old"
  [ -e "$prebuilt_prefix" ] && mv "$prebuilt_prefix" "$prebuilt_prefix.old"
  mv "$tmp/scorep" "$prebuilt_prefix" && rmdir "$tmp"
  rm -rf "$prebuilt_prefix.old"
  if ! works "$prebuilt_prefix"; then
    say "the prebuilt $prebuilt_prefix/bin/scorep-config --version does not run here:"
    "$prebuilt_prefix/bin/scorep-config" --version 2>&1 | sed 's/^/  /' | head -5 || true
    rm -rf "$prebuilt_prefix"
    return 1
  fi
  echo "$want" > "$stamp"
  say "unpacked $prebuilt_tgz into $prebuilt_prefix"
}

build_from_source() {  # into $cache/scorep-8.4-<hash>/prefix; echo nothing, sets prefix
  local dir="$cache/scorep-8.4-${source_hash:0:16}"
  prefix="$dir/prefix"
  if [ -f "$dir/.complete" ] && works "$prefix"; then
    say "reusing the finished build in $dir"
    return 0
  fi
  apt_install "${BUILD[@]}"
  say "building Score-P 8.4 from $source_tgz into $prefix (about 30-40 min on 2 cores)"
  rm -rf "$dir" && mkdir -p "$dir"
  tar xzf "$vendor/$source_tgz" -C "$dir"
  mkdir -p "$dir/scorep-8.4/_build"
  (cd "$dir/scorep-8.4/_build" \
     && ../configure --prefix="$prefix" --without-mpi --without-shmem --enable-shared > "$dir/configure.log" 2>&1 \
     && make -j"$(( $(nproc) + 1 ))" CFLAGS=-O1 CXXFLAGS=-O0 FCFLAGS=-O1 FFLAGS=-O1 > "$dir/make.log" 2>&1 \
     && make install > "$dir/install.log" 2>&1) \
    || { say "the build failed; see the logs in $dir"; tail -20 "$dir"/*.log; return 1; }
  works "$prefix" || { say "the build finished but $prefix/bin/scorep-config does not run"; return 1; }
  rm -rf "$dir/scorep-8.4"
  touch "$dir/.complete"
}

apt_install "${RUNTIME[@]}" || say "could not install ${RUNTIME[*]}; python -m scorep may fail to link"
prefix=""
if prebuilt_matches && use_prebuilt; then
  prefix="$prebuilt_prefix"
else
  build_from_source || exit 1
fi
install_bindings "$prefix" || exit 1
