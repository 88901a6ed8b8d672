"""Which BLAS a PyTorch peer loaded, for bench/nn's PyTorch scripts (torch_gpt_cpu.py,
torch_generate.py). Debian's python3-torch links libblas.so.3, whatever that alternative
points to; on a fresh machine it may be the netlib reference BLAS, single-threaded and ~30x
slower than OpenBLAS (Debian's libblas.so.3 alternatives), and a comparison against that proves
nothing. The shell scripts pin OpenBLAS's OpenMP build (torch_peer.sh); these functions say
what was loaded and refuse the reference BLAS."""
import os
import re
import sys


def loaded_blas():
    """The real paths of the BLAS / LAPACK libraries mapped into this process."""
    libs = set()
    with open("/proc/self/maps") as f:
        for line in f:
            fields = line.split()
            path = fields[-1] if len(fields) >= 6 else ""
            if re.search(r"blas|lapack|mkl", os.path.basename(path)):
                libs.add(os.path.realpath(path))
    return sorted(libs)


def check_blas(allow_reference=False):
    """Returns the loaded BLAS libraries; exits with an error on the netlib reference BLAS
    (call it after a first matmul, so that the library is loaded)."""
    blas = loaded_blas()
    reference = any("/blas/" in p or p.endswith("libblas.so.3.11.0") for p in blas)
    if reference and not any("openblas" in p for p in blas) and not allow_reference:
        sys.exit("error: torch loaded the netlib reference BLAS; pin OpenBLAS, e.g. "
                 "LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp")
    return blas
