#!/usr/bin/env bash
# Installs GPUMix's build dependencies from Debian 12 (idempotent, non-interactive) and
# builds it into build/. Run as root on a fresh machine; later runs only rebuild.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(meson ninja-build pkg-config g++ gfortran python3
          libdnnl-dev libopenmpi-dev openmpi-bin
          nlohmann-json3-dev libcli11-dev libxxhash-dev libgtest-dev libbenchmark-dev
          libpcre2-dev  # GPT-2's Unicode pre-tokenizer regex
          fortunes
          iproute2  # tools/cluster: network namespaces, veth links, tc shaping (the emulated nodes)
          # tools/ci_extra.sh: the ASan + UBSan build and the fuzz targets (clang, its
          # sanitizer and libFuzzer runtimes, its OpenMP, llvm-symbolizer for the reports)
          clang libclang-rt-14-dev libomp-14-dev llvm-14)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ ! -f build/build.ninja ]; then
  meson setup build
fi
ninja -C build
