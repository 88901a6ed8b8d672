#!/usr/bin/env bash
# Installs GPUMix's build dependencies from Debian 12 (idempotent, non-interactive) and
# builds it into build/. Run as root on a fresh machine; later runs only rebuild.
#   tools/setup.sh          the test command's (tools/test.sh): every package, everything built
#   tools/setup.sh --main   the main job's (tools/main_job.sh): build/'s packages and the gpumix
#                           program alone (and what it links), no tests, benchmarks or examples;
#                           a new build/ without the CUDA backend (the main job trains on CPU
#                           ranks: nvcc's compiles were a third of its build), unless --cuda
#   tools/setup.sh --main --cuda   the same with the CUDA backend (the main job on a GPU)
# build/ is configured alike either way (a plain `meson setup build`): the packages its
# configuration looks for (gfortran, GoogleTest, Google Benchmark, Open MPI, nvcc where it is
# there) are in the main job's list too, so that the main job and the test command share
# build/ in either order, and a later plain run builds what a --main run left out.
set -euo pipefail
cd "$(dirname "$0")/.."
main_only=0
main_cuda=0
for arg in "$@"; do
  case "$arg" in
    --main) main_only=1 ;;
    --cuda) main_cuda=1 ;;
    *) echo "setup.sh: unknown option '$arg'; the options are --main (the main job's packages and the gpumix program) and, with it, --cuda (its CUDA backend too)" >&2
       exit 2 ;;
  esac
done
if [ $main_cuda = 1 ] && [ $main_only = 0 ]; then
  echo "setup.sh: --cuda goes with --main (a plain run builds the CUDA backend wherever nvcc is found)" >&2
  exit 2
fi

# build/ and the main job: what meson's configuration of build/ finds (its compilers and
# dependencies, the test frameworks included), and the main job's corpus.
packages=(meson ninja-build pkg-config g++ gfortran python3
          libdnnl-dev libopenmpi-dev openmpi-bin
          nlohmann-json3-dev libcli11-dev libxxhash-dev libgtest-dev libbenchmark-dev
          libpcre2-dev  # GPT-2's Unicode pre-tokenizer regex
          zlib1g-dev  # gzip-compressed corpora
          fortunes)
# The test command's alone (~370 MB installed of the ~900 MB both lists add to Debian's base):
test_packages=(iproute2  # tools/cluster: network namespaces, veth links, tc shaping (the emulated nodes)
               # tools/ci_extra.sh: the ASan + UBSan build and the fuzz targets (clang, its
               # sanitizer and libFuzzer runtimes, its OpenMP, llvm-symbolizer for the reports)
               clang libclang-rt-14-dev libomp-14-dev llvm-14)
[ $main_only = 1 ] || packages+=("${test_packages[@]}")
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

# A build/ that a --main run configured without the CUDA backend (it leaves the marker) gets it
# back for a plain run, whose tests and static GPU report need it; a build/ configured any
# other way is left as it is.
cuda_off_marker=build/.main-job-without-cuda
if [ ! -f build/build.ninja ]; then
  if [ $main_only = 1 ] && [ $main_cuda = 0 ]; then
    meson setup build -Dcuda=disabled
    touch "$cuda_off_marker"
  else
    meson setup build
  fi
elif [ -f "$cuda_off_marker" ] && { [ $main_only = 0 ] || [ $main_cuda = 1 ]; }; then
  meson configure build -Dcuda=auto
  rm "$cuda_off_marker"
fi
if [ $main_only = 1 ]; then
  ninja -C build tools/gpumix
else
  ninja -C build
fi
