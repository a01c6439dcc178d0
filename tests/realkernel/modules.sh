#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the two kernel modules the real-kernel tier needs and Debian's kernel
# lacks or ships unfit, from Debian's own linux-source-6.1 against the
# installed headers; caches them by kernel release (idempotent: a cached
# build is kept, a second run prints nothing):
#   netdevsim.ko        a simulated netdev with a real SR-IOV VF table
#                       (Debian builds the kernel with CONFIG_NETDEVSIM unset)
#   rxe-movable/rdma_rxe.ko
#                       soft-RoCE with an empty disassociate_ucontext: the
#                       kernel moves an RDMA device between network namespaces
#                       only when its driver has that hook, stock rxe has not.
#                       Test-only: the empty hook is safe only while no
#                       process holds a verbs context on the device.
# Usage: modules.sh [CACHE_DIR [RELEASE]]; one line when it builds, nothing when cached.
set -euo pipefail
cache=${1:-/var/cache/railyard/realkernel}
release=${2:-$(cd /lib/modules && ls -d 6.1.*-amd64 2>/dev/null | sort -V | tail -1)}
[ -n "$release" ] || { echo "modules.sh: no Debian 6.1 kernel in /lib/modules" >&2; exit 1; }
build=/lib/modules/$release/build
tarball=/usr/src/linux-source-6.1.tar.xz
out=$cache/$release
# A build made by another version of this script is made again.
stamp=$(sha256sum "$0" | cut -d' ' -f1)
[ "$(cat "$out/modules.stamp" 2>/dev/null)" = "$stamp" ] && exit 0
for need in "$build/Makefile" "$tarball"; do
  [ -e "$need" ] || { echo "modules.sh: $need missing (apt: linux-headers-$release, linux-source-6.1)" >&2; exit 1; }
done

echo "[modules.sh] building netdevsim and a movable rxe for $release from Debian's linux-source-6.1" >&2
work=$(mktemp -d "${TMPDIR:-/tmp}/railyard-modules.XXXXXX")
trap 'rm -rf "$work"' EXIT
src=linux-source-6.1
tar -xJf "$tarball" -C "$work" "$src/drivers/net/netdevsim" "$src/drivers/infiniband/sw/rxe"

rxe=$work/$src/drivers/infiniband/sw/rxe
# The hook goes right before the ops table, and into it; fail loudly if a
# future source moves either anchor instead of building a stock module.
grep -q '^static const struct ib_device_ops rxe_dev_ops = {$' "$rxe/rxe_verbs.c"
grep -q '	.dealloc_ucontext = rxe_dealloc_ucontext,' "$rxe/rxe_verbs.c"
sed -i \
  -e 's/^static const struct ib_device_ops rxe_dev_ops = {$/static void rxe_disassociate_ucontext(struct ib_ucontext *ibuc) {}\n\n&/' \
  -e 's/^\t\.dealloc_ucontext = rxe_dealloc_ucontext,$/&\n\t.disassociate_ucontext = rxe_disassociate_ucontext,/' \
  "$rxe/rxe_verbs.c"
grep -q '\.disassociate_ucontext = rxe_disassociate_ucontext' "$rxe/rxe_verbs.c"

jobs=$(nproc)
make -s -C "$build" M="$work/$src/drivers/net/netdevsim" CONFIG_NETDEVSIM=m -j"$jobs" modules >"$work/netdevsim.log" 2>&1 \
  || { cat "$work/netdevsim.log" >&2; exit 1; }
make -s -C "$build" M="$rxe" CONFIG_RDMA_RXE=m -j"$jobs" modules >"$work/rxe.log" 2>&1 \
  || { cat "$work/rxe.log" >&2; exit 1; }

# Without debug info: 5.5 + 10 MB become 0.2 + 0.25 MB, read over 9p at each load.
mkdir -p "$out/rxe-movable"
strip --strip-debug -o "$out/netdevsim.ko" "$work/$src/drivers/net/netdevsim/netdevsim.ko"
strip --strip-debug -o "$out/rxe-movable/rdma_rxe.ko" "$rxe/rdma_rxe.ko"
echo "$stamp" > "$out/modules.stamp"
