#!/usr/bin/env bash
# Set up BCC (eBPF) for the "sched" collector. Idempotent; run as root.
#
# usage: scripts/setup-bcc.sh [VENV] [HEADERS_DIR]
#   VENV         the project's virtualenv            (default: ./.venv)
#   HEADERS_DIR  merged kernel header tree for BCC   (default: $AACO_BCC_HEADERS
#                or ./.bcc-headers)
#
# Steps (each skipped when already done):
#   1. apt-get install bpfcc-tools python3-bpfcc linux-headers-amd64
#   2. merge linux-headers-<ver>-common and linux-headers-<ver>-amd64 into
#      HEADERS_DIR (Debian splits one kernel build tree into two packages; BCC
#      wants one tree). The collector finds it via BCC_KERNEL_SOURCE or looks
#      for ./.bcc-headers and /opt/aaco/bcc-headers itself.
#   3. symlink Debian's pure-Python bcc package into the venv's site-packages
#      (bcc talks to /usr/lib/x86_64-linux-gnu/libbcc.so.0 through ctypes).
#   4. mount tracefs at /sys/kernel/tracing when it is not mounted.
set -euo pipefail

VENV=${1:-./.venv}
HEADERS=${2:-${AACO_BCC_HEADERS:-./.bcc-headers}}
log() { echo "setup-bcc: $*" >&2; }

if [ "$(id -u)" != 0 ]; then
    log "must run as root (apt-get, mount)"; exit 1
fi

# 1. packages
need=()
for p in bpfcc-tools python3-bpfcc linux-headers-amd64; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
    log "installing ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y --no-install-recommends "${need[@]}"
else
    log "packages present"
fi

# 2. merged header tree (newest installed -amd64 flavour and its -common)
amd64=$(ls -d /usr/src/linux-headers-*-amd64 2>/dev/null | sort -V | tail -n1 || true)
if [ -z "$amd64" ]; then
    log "no /usr/src/linux-headers-*-amd64 found"; exit 1
fi
common=${amd64%-amd64}-common
stamp="$HEADERS/.aaco-merged-from"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$amd64" ]; then
    log "headers already merged in $HEADERS"
else
    log "merging $common + $amd64 -> $HEADERS"
    rm -rf "$HEADERS.tmp"
    mkdir -p "$HEADERS.tmp"
    [ -d "$common" ] && cp -a "$common/." "$HEADERS.tmp/"
    cp -a "$amd64/." "$HEADERS.tmp/"
    # scripts/ and tools/ are relative symlinks into /usr/lib/linux-kbuild-*:
    # make them absolute so the tree works wherever it lives.
    for l in scripts tools; do
        if [ -L "$amd64/$l" ]; then
            ln -sfn "$(readlink -f "$amd64/$l")" "$HEADERS.tmp/$l"
        fi
    done
    echo "$amd64" > "$HEADERS.tmp/.aaco-merged-from"
    rm -rf "$HEADERS"
    mv "$HEADERS.tmp" "$HEADERS"
fi

# 3. bcc importable from the venv
if [ -x "$VENV/bin/python" ]; then
    site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    if [ ! -e "$site/bcc" ]; then
        ln -sfn /usr/lib/python3/dist-packages/bcc "$site/bcc"
        log "linked bcc into $site"
    fi
    "$VENV/bin/python" -c 'import bcc' || { log "bcc still not importable from $VENV"; exit 1; }
else
    log "no venv at $VENV; skipping the bcc link"
fi

# 4. tracefs
if ! grep -qs ' /sys/kernel/tracing tracefs ' /proc/mounts; then
    mount -t tracefs nodev /sys/kernel/tracing
    log "mounted tracefs"
fi
log "ok (BCC_KERNEL_SOURCE=$(cd "$HEADERS" && pwd))"
