#!/bin/sh
# Builds LazyFS (the FUSE file system that drops un-fsynced writes on command; the power-loss
# faults of tools/jepsen and tests/fault/test_power_loss.py mount it) into ~/.cache/lazyfs,
# unless it is built there already. The source and the offline build recipe are not part of
# this repository: they come from the shared vendor dir ($TOPICS_LAZYFS_VENDOR, else
# ../shared/vendor/lazyfs beside the checkout or beside its worktree's parent). Its build.sh
# installs the Debian packages it needs (cmake, g++, libfuse3-dev, fuse3, libspdlog-dev,
# libtoml11-dev, libfmt-dev) and needs no network otherwise. Without the recipe this prints
# a note and exits 0: the tests that need LazyFS are then skipped.
set -eu
out="${TOPICS_LAZYFS_DIR:-$HOME/.cache/lazyfs}"
[ -x "$out/lazyfs" ] && exit 0
repo="$(cd "$(dirname "$0")/.." && pwd)"
vendor=""
for dir in "${TOPICS_LAZYFS_VENDOR:-}" "$repo/../shared/vendor/lazyfs" \
           "$repo/../../shared/vendor/lazyfs"; do
  if [ -n "$dir" ] && [ -x "$dir/build.sh" ] && [ -d "$dir/src/lazyfs" ]; then
    vendor="$(cd "$dir" && pwd)"; break
  fi
done
if [ -z "$vendor" ]; then
  echo "LazyFS recipe not found (set TOPICS_LAZYFS_VENDOR): power-loss tests will skip" >&2
  exit 0
fi
if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi
echo "building LazyFS from $vendor into $out" >&2
$sudo "$vendor/build.sh" "$vendor/src" "$out" >"${TMPDIR:-/tmp}/lazyfs-build.log" 2>&1 \
  || { tail -20 "${TMPDIR:-/tmp}/lazyfs-build.log" >&2; exit 1; }
