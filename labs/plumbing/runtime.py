"""Process-level settings for every ``python -m labs`` command: the memory allocator,
OpenBLAS's idle threads, and the check of ``OPENBLAS_THREAD_TIMEOUT`` before a command
starts.

**The allocator.** A NumPy step allocates and frees dozens of megabyte-sized
temporaries; with glibc's defaults each comes fresh from the kernel (mmap, trim) and
pays its page faults again. :func:`tune_malloc` takes every block from the heap and
raises the trim threshold to 1 GiB, so the next step reuses mapped pages. It changes
no result, only where memory comes from; ``TWINFORMER_MALLOC=default`` keeps glibc's
behaviour. ``python -m labs`` applies it at start-up; lab scripts and pytest do not.

**OpenBLAS's idle threads** poll for the next product for 2^28 cycles before they
sleep, taking a core from the GELU or LayerNorm that follows.
:func:`let_idle_blas_threads_sleep` sets ``OPENBLAS_THREAD_TIMEOUT`` to 4 (2^4
cycles) before NumPy loads, unless the variable is already set;
:func:`check_thread_env` refuses a value that is not a whole number.
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
    """Set ``OPENBLAS_THREAD_TIMEOUT`` for this process unless already set (see above).

    An empty (or blank) value counts as not set: OpenBLAS reads such a value as
    0, its own default (2^28 cycles of polling), the same as no variable at all,
    so ``OPENBLAS_THREAD_TIMEOUT= python -m labs ...`` gets the short timeout too.

    Returns True if set. Too late once NumPy is imported (OpenBLAS has read its
    environment by then): returns False and changes nothing.
    """
    if "numpy" in sys.modules or os.environ.get("OPENBLAS_THREAD_TIMEOUT", "").strip():
        return False
    os.environ["OPENBLAS_THREAD_TIMEOUT"] = BLAS_THREAD_TIMEOUT
    return True


def check_thread_env() -> None:
    """Refuse a bad ``OPENBLAS_THREAD_TIMEOUT`` before the command starts: OpenBLAS reads
    anything but a whole number as 0, its own default, so a typo would silently bring
    back the polling threads.

    Raises:
        UserError: naming the variable, the value it holds and what it expects.
    """
    from .. import UserError

    timeout = os.environ.get("OPENBLAS_THREAD_TIMEOUT", "").strip()
    if timeout and not timeout.isdigit():
        raise UserError(
            f"OPENBLAS_THREAD_TIMEOUT: expected a whole number (idle BLAS threads poll "
            f"2^N cycles; OpenBLAS takes 4 to 30), got {timeout!r}"
        )
