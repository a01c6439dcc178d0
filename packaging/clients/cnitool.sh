#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# cnitool.sh OUT - build cnitool, the CNI project's reference client, into
# OUT/cnitool from Debian's own source package golang-github-appc-cni (1.1.2 in
# bookworm) with Debian's Go, offline after the source download (GOPATH mode, no
# module proxy: libcni and cnitool use only the standard library).
# Idempotent: an existing OUT/cnitool that runs is kept (CI caches OUT).
# Writes nothing outside OUT; apt's own sources are only read (a private deb-src
# list and private apt state dirs are used for the download).
set -euo pipefail
OUT=${1:?usage: cnitool.sh OUT}
SRCPKG=golang-github-appc-cni
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
# cnitool has no --version; with no arguments it prints its usage and exits 1
if [ -x "$OUT/cnitool" ]; then
    case $("$OUT/cnitool" 2>&1 || true) in *"cnitool add"*) exit 0 ;; esac
fi
command -v go >/dev/null || { echo "golang-go is not installed" >&2; exit 1; }

D=$OUT/debsrc
mkdir -p "$D/lists/partial" "$D/cache"
. /etc/os-release
# the Debian mirror this machine's apt already uses (deb822 first, then one-line)
uri=$(sed -n 's/^URIs:[[:space:]]*//p' /etc/apt/sources.list.d/*.sources 2>/dev/null \
      | tr ' ' '\n' | grep -m1 '/debian/*$' || true)
[ -n "$uri" ] || uri=$(awk '$1=="deb"{for(i=2;i<=NF;i++) if($i ~ /:\/\//){print $i; exit}}' \
      /etc/apt/sources.list 2>/dev/null)
[ -n "$uri" ] || { echo "no Debian mirror in the apt sources" >&2; exit 1; }
echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $uri $VERSION_CODENAME main" \
    > "$D/sources.list"
APT=(-o "Dir::Etc::SourceList=$D/sources.list" -o "Dir::Etc::SourceParts=$D/none"
     -o "Dir::State::Lists=$D/lists" -o "Dir::Cache=$D/cache")
apt-get "${APT[@]}" update >/dev/null
( cd "$D" && apt-get "${APT[@]}" source --download-only "$SRCPKG" >/dev/null 2>&1 )
orig=$(ls "$D"/${SRCPKG}_*.orig.tar.* | head -1)

G=$OUT/gopath/src/github.com/containernetworking/cni
rm -rf "$OUT/gopath"
mkdir -p "$G"
tar -xf "$orig" -C "$G" --strip-components=1
( cd "$G/cnitool" && GO111MODULE=off GOPATH="$OUT/gopath" GOCACHE="$OUT/gocache" \
    GOFLAGS= GOPROXY=off CGO_ENABLED=0 go build -trimpath -o "$OUT/cnitool.tmp" . )
mv "$OUT/cnitool.tmp" "$OUT/cnitool"
echo "built $OUT/cnitool from $(basename "$orig") with $(go version | cut -d' ' -f3)"
