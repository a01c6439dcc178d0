#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Remove exactly what packaging/install.sh recorded in <prefix>/install-manifest.txt.
#
# A recorded file is deleted only while its content is still what install wrote
# (same sha256), a recorded symlink only while it still points into our venv;
# anything else was replaced by someone else since and is left alone (with a
# warning). Originals that `install.sh --force` displaced are put back.
# Directories install created are removed only when empty.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: uninstall.sh [--prefix DIR]
  --prefix DIR   the install root given to install.sh (default /opt/railyard)
EOF
}

PREFIX=/opt/railyard
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) PREFIX=$2; shift 2 ;;
    --prefix=*) PREFIX=${1#*=}; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "uninstall.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
done
PREFIX=$(realpath -m "$PREFIX")
MANIFEST=$PREFIX/install-manifest.txt

log() { printf 'uninstall.sh: %s\n' "$*" >&2; }
[ -f "$MANIFEST" ] || { log "nothing to do: no $MANIFEST"; exit 0; }

declare -a FILES=() LINKS=() DISPLACED=() DIRS=() VENVS=()
while IFS=$'\t' read -r kind path detail; do
  case "$kind" in
    file) FILES+=("$path	$detail") ;;
    link) LINKS+=("$path	$detail") ;;
    displaced) DISPLACED+=("$path	$detail") ;;
    dir) DIRS+=("$path") ;;
    venv) VENVS+=("$path") ;;
    ''|\#*) ;;
    *) log "ignoring unknown manifest line kind '$kind'" ;;
  esac
done < "$MANIFEST"

kept=0
for entry in "${FILES[@]}"; do
  path=${entry%%$'\t'*}; sum=${entry#*$'\t'}
  if [ ! -e "$path" ] && [ ! -L "$path" ]; then continue; fi
  if [ ! -L "$path" ] && [ "$(sha256sum "$path" | cut -d' ' -f1)" = "$sum" ]; then
    rm -f "$path"
  else
    log "leaving $path: changed since install (not ours any more)"; kept=1
  fi
done
for entry in "${LINKS[@]}"; do
  path=${entry%%$'\t'*}; target=${entry#*$'\t'}
  if [ -L "$path" ] && [ "$(readlink "$path")" = "$target" ]; then
    rm -f "$path"
  elif [ -e "$path" ] || [ -L "$path" ]; then
    log "leaving $path: no longer our link to $target"; kept=1
  fi
done
for entry in "${DISPLACED[@]}"; do
  path=${entry%%$'\t'*}; keep=${entry#*$'\t'}
  [ -e "$keep" ] || [ -L "$keep" ] || continue
  if [ -e "$path" ] || [ -L "$path" ]; then
    log "not restoring $path (occupied); its original stays in $keep"; kept=1
  else
    mv "$keep" "$path"
    log "restored the original $path"
  fi
done
for venv in "${VENVS[@]}"; do
  # Only ever a virtualenv: refuse to rm -rf anything that does not look like one.
  if [ -f "$venv/pyvenv.cfg" ]; then
    rm -rf "$venv"
  elif [ -e "$venv" ]; then
    log "leaving $venv: not a virtualenv"; kept=1
  fi
done
rm -f "$MANIFEST"
# Deepest first, and only when empty: a directory we created may since hold
# someone else's files (another vendor's plugin in /opt/cni/bin).
while IFS= read -r dir; do
  if [ -d "$dir" ]; then rmdir "$dir" 2>/dev/null || true; fi
done < <(printf '%s\n' "${DIRS[@]+"${DIRS[@]}"}" | awk '{ print length, $0 }' | sort -rn | cut -d' ' -f2-)
if [ "$kept" = 0 ]; then
  log "removed everything install.sh recorded"
else
  log "done; some files were left in place (see above)"
fi
