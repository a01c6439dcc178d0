#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Install Railyard onto a node the way a runtime expects to find it:
#   <prefix>/venv                  a private virtualenv holding railyard-cni + deps
#   <cni-bin-dir>/{sriov,ib-sriov,rdma,railyard-ipam}
#                                  stdlib-only shims (cni/agent/shim.py), run with
#                                  -IS by the venv's interpreter: they forward to
#                                  railyard-agent, or run the plugin directly
#   <bin-dir>/{ipamd,railyard,railyard-agent,railyard-exporter}
#                                  symlinks to the venv's console scripts (and
#                                  railyard-sim with --with-sim)
#   <prefix>/install-manifest.txt  everything the above created; uninstall.sh reads it
#
# Re-running is an upgrade. A file in the CNI bin dir (or bin dir) that an
# earlier run of this script did not create is never overwritten (Debian's
# /usr/lib/cni, another vendor's `rdma`), unless --force, which keeps the
# original under <prefix>/displaced/ so that uninstall.sh can put it back.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: install.sh [options] [SOURCE]
  SOURCE               repo checkout to install (default: the repo holding this script)
  --prefix DIR         install root; the venv goes to DIR/venv (default /opt/railyard)
  --cni-bin-dir DIR    where runtimes look for CNI plugins (default /opt/cni/bin)
  --bin-dir DIR        where ipamd, railyard, railyard-agent, railyard-exporter (and railyard-sim) are linked (default /usr/local/bin;
                       "none" to skip)
  --with-sim           also install the simulated host (the railyard-sim distribution
                       in sim/, the "sim" extra): for CI, demos and benchmarks, never
                       needed on a real node
  --python PY          interpreter that creates the venv (default python3, >= 3.11)
  --agent-socket PATH  railyard-agent's socket baked into the CNI shims
                       (default /run/railyard/agent/agent.sock)
  --force              replace files in the bin dirs that this installer did not create
  --with-webhook       also install the Kubernetes client `railyard webhook serve` needs
EOF
}

PREFIX=/opt/railyard
CNI_BIN_DIR=/opt/cni/bin
BIN_DIR=/usr/local/bin
PYTHON=python3
FORCE=0
WITH_SIM=0
EXTRAS=""
SOURCE=""
AGENT_SOCKET=/run/railyard/agent/agent.sock
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) PREFIX=$2; shift 2 ;;
    --prefix=*) PREFIX=${1#*=}; shift ;;
    --cni-bin-dir) CNI_BIN_DIR=$2; shift 2 ;;
    --cni-bin-dir=*) CNI_BIN_DIR=${1#*=}; shift ;;
    --bin-dir) BIN_DIR=$2; shift 2 ;;
    --bin-dir=*) BIN_DIR=${1#*=}; shift ;;
    --python) PYTHON=$2; shift 2 ;;
    --python=*) PYTHON=${1#*=}; shift ;;
    --agent-socket) AGENT_SOCKET=$2; shift 2 ;;
    --agent-socket=*) AGENT_SOCKET=${1#*=}; shift ;;
    --force) FORCE=1; shift ;;
    --with-sim) WITH_SIM=1; shift ;;
    --with-webhook) EXTRAS="[webhook]"; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "install.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
    *) SOURCE=$1; shift ;;
  esac
done

log() { printf 'install.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
# shellcheck source=packaging/venv.sh
. "$(dirname "${BASH_SOURCE[0]}")/venv.sh"

[ -n "$SOURCE" ] || SOURCE=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
[ -f "$SOURCE/pyproject.toml" ] || die "$SOURCE is not a railyard checkout (no pyproject.toml)"
SOURCE=$(cd "$SOURCE" && pwd)
# Absolute from here on: the manifest and the launchers' shebangs record them.
PREFIX=$(realpath -m "$PREFIX")
CNI_BIN_DIR=$(realpath -m "$CNI_BIN_DIR")
[ "$BIN_DIR" = none ] || BIN_DIR=$(realpath -m "$BIN_DIR")

# The launchers' shebang carries the venv path; keep it short and free of
# spaces (the kernel splits a shebang line at the first blank).
case "$PREFIX$CNI_BIN_DIR$BIN_DIR" in *[[:space:]]*) die "paths must not contain spaces" ;; esac

VENV=$PREFIX/venv
MANIFEST=$PREFIX/install-manifest.txt
# CNI type name -> console script in pyproject.toml ([project.scripts]), from
# the plugin registry (cni/plugins/registry.py: standard library only, so the
# interpreter reads it from the checkout before the venv exists).
mapfile -t CNI_PLUGINS < <("$PYTHON" -I - "$SOURCE" <<'EOF'
import sys
sys.path.insert(0, sys.argv[1])
from cni.plugins.registry import PLUGINS
for p in PLUGINS.values():
    print(f"{p.cni_type}:{p.script}")
EOF
)
[ ${#CNI_PLUGINS[@]} -gt 0 ] || die "cannot read the plugin list from $SOURCE/cni/plugins/registry.py"
LINKED_SCRIPTS=(ipamd railyard railyard-agent railyard-exporter)
[ "$WITH_SIM" = 1 ] && LINKED_SCRIPTS+=(railyard-sim)
MARK="railyard-cni launcher"

# Directories this and earlier runs created (uninstall removes them when empty).
declare -a CREATED_DIRS=()
declare -A OWNED=()  # path -> 1 for every file/link an earlier run recorded
if [ -f "$MANIFEST" ]; then
  while IFS=$'\t' read -r kind path _rest; do
    case "$kind" in
      dir) CREATED_DIRS+=("$path") ;;
      file|link|displaced) OWNED[$path]=1 ;;
      venv) OWNED[$path]=1 ;;
    esac
  done < "$MANIFEST"
fi

make_dir() {
  local d=$1 parent missing=()
  # Record every level we create, outermost first, so uninstall can rmdir them.
  parent=$d
  while [ ! -d "$parent" ]; do missing=("$parent" "${missing[@]}"); parent=$(dirname "$parent"); done
  for d in "${missing[@]}"; do
    mkdir -m 0755 "$d"
    CREATED_DIRS+=("$d")
  done
}

# --- preflight: never clobber what we do not own --------------------------------
declare -a TARGETS=()
for spec in "${CNI_PLUGINS[@]}"; do TARGETS+=("$CNI_BIN_DIR/${spec%%:*}"); done
if [ "$BIN_DIR" != none ]; then
  for s in "${LINKED_SCRIPTS[@]}"; do TARGETS+=("$BIN_DIR/$s"); done
fi
declare -a FOREIGN=()
for t in "${TARGETS[@]}"; do
  if { [ -e "$t" ] || [ -L "$t" ]; } && [ -z "${OWNED[$t]:-}" ]; then FOREIGN+=("$t"); fi
done
if [ ${#FOREIGN[@]} -gt 0 ] && [ "$FORCE" != 1 ]; then
  die "refusing to overwrite files this installer did not create: ${FOREIGN[*]}
  (another CNI package owns them?) Choose another --cni-bin-dir/--bin-dir, or
  pass --force to replace them; the originals are then kept in $PREFIX/displaced/
  and put back by uninstall.sh."
fi

# --- venv + package ---------------------------------------------------------------
make_dir "$PREFIX"
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
  || die "$PYTHON is older than Python 3.11"
if [ -e "$VENV" ] && [ -z "${OWNED[$VENV]:-}" ]; then
  die "$VENV exists but no earlier install.sh run created it; choose another --prefix"
fi
# An upgrade with another --python (or a python3 that changed) makes it again.
fresh_venv "$PYTHON" "$VENV"
# Bytecode is compiled at install (pip's default; PIP_NO_COMPILE would undo it,
# and every plugin exec would then recompile in a read-only /opt).
unset PIP_NO_COMPILE PIP_USER PYTHONPATH PYTHONHOME
log "installing $SOURCE into $VENV (dependencies from PyPI)"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
pip_quiet() {
  # Build backends are chatty on stderr; show it only when pip fails.
  "$VENV/bin/python" -m pip "$@" >"$WORK/pip.log" 2>&1 || { cat "$WORK/pip.log" >&2; return 1; }
}
# Build from a snapshot of the checkout: pip builds in-tree otherwise, and the
# checkout may be read-only (container build) or in use by others.
mkdir "$WORK/src"
tar -C "$SOURCE" --exclude=./.git --exclude=./.venv --exclude=./build --exclude=./dist \
    --exclude='*.egg-info' --exclude=__pycache__ -cf - . | tar -C "$WORK/src" -xf -
pip_quiet wheel -q --no-deps -w "$WORK/wheel" "$WORK/src"
WHEEL=$(ls "$WORK"/wheel/railyard_cni-*.whl)
pip_quiet install -q --upgrade --upgrade-strategy only-if-needed "$WHEEL$EXTRAS"
# The version string rarely changes between two installs of a checkout, and a
# re-install must still be an upgrade: always replace our own package.
pip_quiet install -q --force-reinstall --no-deps "$WHEEL"
SITE=$("$VENV/bin/python" -I -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
COMPILE=("$SITE/cni" "$SITE/ipamd" "$SITE/railyard")
if [ "$WITH_SIM" = 1 ]; then
  log "installing the simulated host (railyard-sim) from $SOURCE/sim"
  pip_quiet wheel -q --no-deps -w "$WORK/sim-wheel" "$WORK/src/sim"
  # --no-deps: what it needs (railyard-cni, click, PyYAML) is installed above,
  # and the name is never looked up on an index.
  pip_quiet install -q --force-reinstall --no-deps "$WORK"/sim-wheel/railyard_sim-*.whl
  COMPILE+=("$SITE/railyard_sim")
elif "$VENV/bin/python" -I -c 'import railyard_sim' 2>/dev/null; then
  log "removing the simulated host an earlier --with-sim run installed"
  pip_quiet uninstall -q -y railyard-sim
fi
# Its link goes whenever the simulator is not asked for, also when a venv
# made again (another interpreter) has no simulator to uninstall.
if [ "$WITH_SIM" != 1 ] && [ "$BIN_DIR" != none ] && [ -n "${OWNED[$BIN_DIR/railyard-sim]:-}" ]; then
  rm -f "$BIN_DIR/railyard-sim"
fi
"$VENV/bin/python" -I -m compileall -q -j 0 "${COMPILE[@]}" >/dev/null

# Entry points come from the installed metadata, so the launchers follow
# pyproject.toml instead of repeating it.
entry_point() {
  "$VENV/bin/python" -I - "$1" <<'EOF'
import sys
from importlib.metadata import entry_points
(ep,) = [e for e in entry_points(group="console_scripts") if e.name == sys.argv[1]]
print(ep.module, ep.attr)
EOF
}

declare -a MANIFEST_LINES=()
displace() {
  # Keep a --force'd original so uninstall can restore it.
  local t=$1 keep
  if { [ -e "$t" ] || [ -L "$t" ]; } && [ -z "${OWNED[$t]:-}" ]; then
    make_dir "$PREFIX/displaced"
    keep=$PREFIX/displaced/$(printf '%s' "$t" | tr '/' '%')
    mv -f "$t" "$keep"
    log "--force: moved foreign $t to $keep"
    MANIFEST_LINES+=("displaced	$t	$keep")
  fi
}
# Displaced originals recorded by an earlier run stay recorded.
if [ -f "$MANIFEST" ]; then
  while IFS= read -r line; do
    case "$line" in displaced$'\t'*) MANIFEST_LINES+=("$line") ;; esac
  done < "$MANIFEST"
fi

# --- CNI launchers ----------------------------------------------------------------
make_dir "$CNI_BIN_DIR"
for spec in "${CNI_PLUGINS[@]}"; do
  name=${spec%%:*}; script=${spec#*:}
  read -r module func < <(entry_point "$script") || die "no console script $script"
  target=$CNI_BIN_DIR/$name
  displace "$target"
  tmp=$(mktemp "$CNI_BIN_DIR/.$name.XXXXXX")
  # The shim (cni/agent/shim.py) forwards to railyard-agent and runs the plugin
  # itself (module:func, by the venv's interpreter) when no agent answers.
  "$VENV/bin/python" -I - "$name" "$module" "$func" "$VENV/bin/python" "$AGENT_SOCKET" \
      > "$tmp" <<'EOF'
import sys
from cni.agent.shim import render
plugin, module, func, python, sock = sys.argv[1:]
sys.stdout.write(render(plugin, module, func, python, sock, interpreter=python))
EOF
  chmod 0755 "$tmp"
  # rename(2) so that a runtime exec'ing the plugin right now sees old or new.
  mv -f "$tmp" "$target"
  MANIFEST_LINES+=("file	$target	$(sha256sum "$target" | cut -d' ' -f1)")
done

# --- operator commands ------------------------------------------------------------
if [ "$BIN_DIR" != none ]; then
  make_dir "$BIN_DIR"
  for s in "${LINKED_SCRIPTS[@]}"; do
    [ -x "$VENV/bin/$s" ] || die "console script $s missing from $VENV/bin"
    displace "$BIN_DIR/$s"
    ln -sfn "$VENV/bin/$s" "$BIN_DIR/$s"
    MANIFEST_LINES+=("link	$BIN_DIR/$s	$VENV/bin/$s")
  done
fi

# --- manifest (written atomically; uninstall.sh trusts only it) --------------------
tmp=$(mktemp "$PREFIX/.install-manifest.XXXXXX")
{
  echo "# railyard-cni install manifest: kind<TAB>path<TAB>detail; read by uninstall.sh"
  echo "venv	$VENV	$SOURCE"
  printf '%s\n' "${MANIFEST_LINES[@]}"
  # uninstall.sh removes these (deepest first) once they are empty.
  printf '%s\n' "${CREATED_DIRS[@]}" | awk '!seen[$0]++' | sed 's/^/dir\t/'
} > "$tmp"
chmod 0644 "$tmp"
mv -f "$tmp" "$MANIFEST"

# --- smoke test: a packaging mistake must fail here, not in a pod ----------------
for spec in "${CNI_PLUGINS[@]}"; do
  name=${spec%%:*}
  out=$(env -i CNI_COMMAND=VERSION "$CNI_BIN_DIR/$name" </dev/null) \
    || die "$CNI_BIN_DIR/$name VERSION failed: $out"
  case "$out" in *supportedVersions*) ;; *) die "$CNI_BIN_DIR/$name VERSION printed: $out" ;; esac
done
log "installed: venv $VENV, CNI plugins in $CNI_BIN_DIR, manifest $MANIFEST"
