#!/usr/bin/env bash
# Run HERE (the development machine, with apt and the network), before a GPU call:
# downloads the Debian packages that the GPU machine lacks (GoogleTest, Google Benchmark,
# oneDNN, nlohmann-json, CLI11, PCRE2, xxHash, pkgconf, and the fortunes corpus of the
# heterogeneous run), unpacks them with
# `dpkg -x` (never into /), trims what the build does not need, and packs the result as
# .gpudeps/deps.tar.xz: the only thing that travels (name `.gpudeps` in the device tool's
# `carry`). bench/gpu/check.sh unpacks it on the GPU machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
DEPS=.gpudeps
PKGS=(libgtest-dev libbenchmark-dev libbenchmark1debian libdnnl2 libdnnl-dev
      nlohmann-json3-dev libcli11-dev libpcre2-dev libpcre2-8-0 libxxhash-dev libxxhash0
      pkgconf pkgconf-bin libpkgconf3 fortunes)
rm -rf "$DEPS"
mkdir -p "$DEPS/debs" "$DEPS/root"
(cd "$DEPS/debs" && apt-get download "${PKGS[@]}")
for f in "$DEPS"/debs/*.deb; do dpkg -x "$f" "$DEPS/root"; done
R="$DEPS/root"
# Trim: docs, man pages, cmake files.
rm -rf "$R"/usr/share/doc "$R"/usr/share/man "$R"/usr/share/lintian \
       "$R"/usr/lib/x86_64-linux-gnu/cmake "$R"/usr/share/cmake "$R"/usr/lib/cmake
tar -C "$DEPS" -cJf "$DEPS/deps.tar.xz" root
rm -rf "$DEPS/debs" "$DEPS/root"
echo "prepare.sh: $(du -sh "$DEPS/deps.tar.xz" | cut -f1) in $DEPS/deps.tar.xz (packages: ${PKGS[*]})"
