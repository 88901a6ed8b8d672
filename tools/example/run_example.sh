#!/usr/bin/env bash
# Installs the built library into a temporary root, compiles tools/example/train.c against
# it through pkg-config, as a user of the installed library would, and runs it.
# Usage: run_example.sh BUILD_DIR
set -euo pipefail
build=$(realpath "$1")
here=$(dirname "$(realpath "$0")")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
meson install -C "$build" --destdir "$work/root" --no-rebuild --quiet
pc=$(dirname "$(find "$work/root" -name gpumix.pc | head -n 1)")
export PKG_CONFIG_PATH="$pc" PKG_CONFIG_SYSROOT_DIR="$work/root"
cc -std=c11 -Wall -Wextra -Werror "$here/train.c" $(pkg-config --cflags --libs gpumix) -o "$work/train"
libdir=$(dirname "$(find "$work/root" -name 'libgpumix.so*' | head -n 1)")
cd "$work"
LD_LIBRARY_PATH="$libdir" OMP_NUM_THREADS=2 GPUMIX_CACHE="$work/cache" ./train /usr/share/common-licenses/GPL-3 run
