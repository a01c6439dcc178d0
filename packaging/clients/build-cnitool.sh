#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# build-cnitool.sh - build cnitool (the CNI project's reference client) from
# Debian's own source package golang-github-appc-cni (1.1.2 in bookworm), with
# Debian's Go 1.19 and no module proxy. Output: $OUT/cnitool (default
# /tmp/cnitool-build/cnitool). Nothing is written outside $OUT; the system's apt
# sources are left alone (a private deb-src list is used just for this download).
#
# usage: build-cnitool.sh            (root, or any user who can run apt-get)
# then:  CNI_PATH=/usr/lib/cni NETCONFPATH=/path/to/net.d \
#          /tmp/cnitool-build/cnitool add|check|del <net-name> /var/run/netns/<ns>
#        cnitool 1.1.2 picks CNI_IFNAME (default eth0), CNI_ARGS ("K=V;K2=V2"),
#        CAP_ARGS (JSON runtimeConfig); containerID = "cnitool-" + first 20 hex
#        of sha512(netns path); result cache in /var/lib/cni/results.
set -euo pipefail
OUT=${OUT:-/tmp/cnitool-build}
SRCPKG=${SRCPKG:-golang-github-appc-cni}
mkdir -p "$OUT"
command -v go >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y golang-go >/dev/null

# 1. the Debian source package, through apt with a throw-away deb-src list
D=$OUT/debsrc; mkdir -p "$D/lists/partial" "$D/cache"
. /etc/os-release
# the mirror is the one this machine's apt already uses for Debian's main archive
uri=$(sed -n 's/^URIs:[[:space:]]*//p' /etc/apt/sources.list.d/*.sources 2>/dev/null | tr ' ' '\n' | grep -m1 '/debian/*$' || true)
[ -n "$uri" ] || uri=$(awk '$1=="deb"{for(i=2;i<=NF;i++) if($i ~ /:\/\//){print $i; exit}}' /etc/apt/sources.list 2>/dev/null)
[ -n "$uri" ] || { echo "no Debian mirror found in the apt sources" >&2; exit 1; }
echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $uri $VERSION_CODENAME main" > "$D/sources.list"
APT=(-o "Dir::Etc::SourceList=$D/sources.list" -o "Dir::Etc::SourceParts=$D/none"
     -o "Dir::State::Lists=$D/lists" -o "Dir::Cache=$D/cache")
apt-get "${APT[@]}" update >/dev/null
( cd "$D" && apt-get "${APT[@]}" source --download-only "$SRCPKG" >/dev/null 2>&1 )
orig=$(ls "$D"/${SRCPKG}_*.orig.tar.* | head -1)

# 2. a private GOPATH holding exactly that source (libcni + pkg/ use only stdlib)
G=$OUT/gopath/src/github.com/containernetworking/cni
rm -rf "$OUT/gopath"; mkdir -p "$G"
tar -xf "$orig" -C "$G" --strip-components=1

# 3. build, GOPATH mode: no go.mod resolution, no proxy, no network
( cd "$G/cnitool" && GO111MODULE=off GOPATH="$OUT/gopath" GOCACHE="$OUT/gocache" \
    GOFLAGS= GOPROXY=off CGO_ENABLED=0 go build -trimpath -o "$OUT/cnitool" . )
echo "built $OUT/cnitool from $(basename "$orig") with $(go version | cut -d' ' -f3)"
