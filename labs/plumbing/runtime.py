"""Process-level settings that ``python -m labs`` applies at start-up (lab scripts and
pytest do not): the memory allocator and OpenBLAS's idle threads.

A NumPy step allocates and frees dozens of megabyte-sized temporaries; glibc gives each
back to the kernel and pays its page faults again. :func:`tune_malloc` keeps them in the
heap (``TWINFORMER_MALLOC=default``: glibc's way). OpenBLAS's idle threads poll 2^28
cycles before they sleep, taking a core from the layer that follows:
:func:`let_idle_blas_threads_sleep` sets ``OPENBLAS_THREAD_TIMEOUT`` to 4 unless set.
"""

from __future__ import annotations

import ctypes
import os
import sys

_M_TRIM_THRESHOLD = -1  # mallopt parameter numbers, from glibc's <malloc.h>
_M_MMAP_MAX = -4
MiB = 1024 * 1024


def tune_malloc() -> bool:
    """Keep freed NumPy temporaries in the process (glibc only). Returns True if applied."""
    if os.environ.get("TWINFORMER_MALLOC") == "default" or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and other C libraries: nothing to tune
        return False
    # setting the trim threshold switches off glibc's dynamic mmap threshold; no mmap at all
    # (M_MMAP_MAX 0) also keeps the blocks above the threshold's 32 MiB ceiling for reuse
    return bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, 1024 * MiB))


BLAS_THREAD_TIMEOUT = "4"  # OPENBLAS_THREAD_TIMEOUT: idle BLAS threads poll 2^4 cycles


def let_idle_blas_threads_sleep() -> bool:
    """Set ``OPENBLAS_THREAD_TIMEOUT`` unless set to something (blank is OpenBLAS's default,
    as unset); True if set. Too late once NumPy is imported: False, nothing changed."""
    if "numpy" in sys.modules or os.environ.get("OPENBLAS_THREAD_TIMEOUT", "").strip():
        return False
    os.environ["OPENBLAS_THREAD_TIMEOUT"] = BLAS_THREAD_TIMEOUT
    return True


def check_thread_env() -> None:
    """Refuse (UserError) an ``OPENBLAS_THREAD_TIMEOUT`` that is not a whole number: OpenBLAS
    would silently read it as its default."""
    from .. import UserError

    timeout = os.environ.get("OPENBLAS_THREAD_TIMEOUT", "").strip()
    if timeout and not timeout.isdigit():
        raise UserError(
            f"OPENBLAS_THREAD_TIMEOUT: expected a whole number (idle BLAS threads poll "
            f"2^N cycles; OpenBLAS takes 4 to 30), got {timeout!r}"
        )
