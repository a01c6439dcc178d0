#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Runs in the node DaemonSet's init container (image: packaging/container/Containerfile)
# with the host's / mounted at $HOST_ROOT. Copies /opt/railyard (interpreter +
# venv) and the CNI launchers to the host, atomically per file, then proves the
# result runs *on the host* (chroot) before the pod goes Ready.
#   HOST_ROOT        host filesystem mount (default /host)
#   HOST_CNI_BIN     CNI bin dir on the host (default /opt/cni/bin)
#   HOST_PREFIX      install root on the host (default /opt/railyard; must equal
#                    the image's /opt/railyard: shebangs carry that path)
#   FORCE            1: replace same-named plugins another vendor put there
set -eu
HOST_ROOT=${HOST_ROOT:-/host}
HOST_CNI_BIN=${HOST_CNI_BIN:-/opt/cni/bin}
HOST_PREFIX=${HOST_PREFIX:-/opt/railyard}
FORCE=${FORCE:-0}
[ "$HOST_PREFIX" = /opt/railyard ] || { echo "HOST_PREFIX must be /opt/railyard" >&2; exit 1; }

dst=$HOST_ROOT$HOST_PREFIX
versions=$dst.d
stamp=$(date +%Y%m%d%H%M%S)-$$
mkdir -p "$HOST_ROOT$HOST_CNI_BIN" "$versions"
# Each install is a new tree under /opt/railyard.d/; /opt/railyard is a symlink
# swapped with one rename(2), so a plugin exec'd during the upgrade runs the
# old tree or the new one, never a half-copied one.
cp -a /opt/railyard "$versions/$stamp"
if [ -d "$dst" ] && [ ! -L "$dst" ]; then
  # First upgrade from a plain directory (e.g. an install.sh install): that
  # one cannot be replaced atomically; move it aside first.
  mv "$dst" "$versions/0-previous-dir"  # sorts as the oldest
fi
ln -s "$(basename "$versions")/$stamp" "$dst.tmp.$$"
mv -T "$dst.tmp.$$" "$dst"
# Keep the previous tree too: a plugin started a moment ago may still be
# importing from it. Older ones go.
# shellcheck disable=SC2012  # names are our own timestamps, no odd characters
ls -1 "$versions" | sort -r | tail -n +3 | while read -r old; do
  rm -rf "${versions:?}/$old"
done

for plugin in sriov ib-sriov rdma railyard-ipam; do
  target=$HOST_ROOT$HOST_CNI_BIN/$plugin
  if [ -e "$target" ] && ! grep -q 'railyard-cni launcher' "$target" 2>/dev/null \
     && [ "$FORCE" != 1 ]; then
    echo "refusing to replace $HOST_CNI_BIN/$plugin: not a Railyard launcher (FORCE=1 to replace)" >&2
    exit 1
  fi
  cp /opt/railyard/cni-bin/$plugin "$target.railyard-new"
  chmod 0755 "$target.railyard-new"
  mv -f "$target.railyard-new" "$target"
done

# The decisive check: the launcher's interpreter and libraries resolve on the host.
chroot "$HOST_ROOT" env -i CNI_COMMAND=VERSION "$HOST_CNI_BIN/sriov" </dev/null
echo "railyard: installed into $HOST_PREFIX and $HOST_CNI_BIN on the host"
