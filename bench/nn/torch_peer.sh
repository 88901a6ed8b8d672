# Sourced by bench/nn's comparison scripts: `torch_python ARGS...` runs Debian's python3 with
# PyTorch pinned to OpenBLAS's OpenMP build (Debian's libblas.so.3 alternative may be the
# single-threaded netlib reference BLAS, ~30x slower), and `require_torch` stops early, with
# the package to install, where PyTorch or that OpenBLAS is missing.
TORCH_BLAS_DIR=/usr/lib/x86_64-linux-gnu/openblas-openmp

require_torch() {
  /usr/bin/python3 -c 'import torch' 2>/dev/null ||
    { echo "PyTorch is missing: apt-get install -y python3-torch (Debian's), or leave out the torch-* modes" >&2; exit 1; }
  [ -d "$TORCH_BLAS_DIR" ] ||
    { echo "PyTorch runs pinned to OpenBLAS's OpenMP build, not installed here: apt-get install -y libopenblas0-openmp" >&2; exit 1; }
}

torch_python() { LD_LIBRARY_PATH=$TORCH_BLAS_DIR /usr/bin/python3 "$@"; }
