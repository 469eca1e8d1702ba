#!/bin/sh
# The Debian packages the tests and benches run as real peers: ZooKeeper (the cluster
# tests start it from its jars, on loopback, in temp dirs), Redis (the benches' side by
# side peer), Chromium with its driver (the console's browser test runs it headless),
# nftables, iproute2 (ip, tc), e2fsprogs and fuse3 (the fault tests cut and slow links
# between network namespaces, loop-mount a small ext4 and mount LazyFS); then LazyFS
# itself, built by tools/install_lazyfs.sh.
# Installs only what is missing; needs root or sudo. Nothing is started here.
set -eu
"$(dirname "$0")/install_lazyfs.sh"
missing=""
[ -f /usr/share/java/zookeeper.jar ] || missing="$missing zookeeper"
command -v redis-server >/dev/null 2>&1 || missing="$missing redis-server"
[ -x /usr/bin/chromium ] || missing="$missing chromium"
[ -x /usr/bin/chromedriver ] || missing="$missing chromium-driver"
command -v nft >/dev/null 2>&1 || [ -x /usr/sbin/nft ] || missing="$missing nftables"
command -v fusermount3 >/dev/null 2>&1 || missing="$missing fuse3"
command -v tc >/dev/null 2>&1 || [ -x /usr/sbin/tc ] || [ -x /sbin/tc ] \
  || missing="$missing iproute2"
command -v mkfs.ext4 >/dev/null 2>&1 || [ -x /usr/sbin/mkfs.ext4 ] || [ -x /sbin/mkfs.ext4 ] \
  || missing="$missing e2fsprogs"
[ -z "$missing" ] && exit 0
if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
echo "installing Debian packages:$missing" >&2
# shellcheck disable=SC2086
$sudo apt-get install -y -q --no-install-recommends $missing >/dev/null \
  || { $sudo apt-get update -q >/dev/null && $sudo apt-get install -y -q --no-install-recommends $missing >/dev/null; }
