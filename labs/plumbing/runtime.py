"""Process-level settings for every ``python -m labs`` command: the memory allocator,
OpenBLAS's idle threads, and the check of ``TWINFORMER_NUM_THREADS`` (NumPy's thread
pool) and ``OPENBLAS_THREAD_TIMEOUT`` before a command starts.

A NumPy training step allocates and frees dozens of megabyte-sized
temporaries. With glibc's defaults, blocks above the mmap threshold (a size
glibc adjusts as it goes, 128 KiB to 32 MiB) come straight from the kernel
and go back to it on ``free``, and the free memory at the top of the heap is
handed back to the kernel ("trimmed") whenever it exceeds twice that
threshold, so every step pays fresh page faults for the same memory: on a
2-core VM the default config's NumPy step took 90.9 ms without this setting
and 52.9 ms with it (``TWINFORMER_MALLOC=default python -m labs bench``
against plain ``python -m labs bench``, back to back).

Taking every block from the heap (no mmap: glibc's mmap threshold is at most
32 MiB, below the (16384, 512) float32 activations of a B=64, T=256 step) and
raising the trim threshold to 1 GiB keeps freed blocks in the process for
reuse: the next step's temporaries land on pages already mapped. This is
"reuse buffers across steps" done once, below every formula, instead of
buffers threaded through the layers. The setting is process-wide, so in
``bench`` both backends run under it. It changes no result, only where memory
comes from; set ``TWINFORMER_MALLOC=default`` to keep glibc's behaviour and see
the difference. The cost: memory a command has freed stays with the process
(up to 1 GiB at the top of the heap) instead of going back to the system
until the command ends.

``python -m labs`` applies it at start-up; a lab script (``python
labs/NN_topic/lab.py``), pytest, or your own script that imports
``numpy_impl`` runs with glibc's defaults unless it calls
``labs.plumbing.runtime.tune_malloc()`` itself.

**OpenBLAS's idle threads.** After each matrix product, OpenBLAS's worker
threads keep polling for the next one for 2^28 CPU cycles (about 0.1 s)
before they sleep. In a NumPy step the product is followed by GELU, LayerNorm
or attention's tiles: a polling BLAS thread takes a core from them. Measured on a 2-core VM
(``/proc/self/task/*/stat`` around 20 GELUs of a (16384, 512) array, each
after a 2048 x 512 x 2048 product): the BLAS worker used 0.9 s of CPU for
0.3 s of products, and the GELUs took 365-387 ms in all, against 0.3 s of
CPU and 228-265 ms with the threads told to sleep at once.
:func:`let_idle_blas_threads_sleep` sets ``OPENBLAS_THREAD_TIMEOUT`` (OpenBLAS
reads it once, when NumPy loads it: ``python -m labs`` sets it before its
first import of NumPy) to :data:`BLAS_THREAD_TIMEOUT`, 4: 2^4 cycles, so an
idle thread sleeps at once and the next product wakes it. Whole steps, one
process per setting, three rounds alternated on the same busy VM (median
step of 6 at B=64, T=256; of 100 at the default size): OpenBLAS's default
1823-1885 ms and 91-100 ms; 2^4 1323-1614 ms and 76-105 ms; 2^18, 2^20 and
2^22 (0.1 to 2 ms of polling) 1348-1633 ms and 70-93 ms, no better. A
value you set yourself is kept (28 is OpenBLAS's own default); an empty one
counts as unset, as OpenBLAS reads it, and anything but a whole number is
refused before a command starts (:func:`check_thread_env`). As with the
allocator, lab scripts, pytest and your own scripts keep OpenBLAS's default
unless the variable is set before they start. It changes no result, only
when an idle thread sleeps; other BLAS libraries (MKL, Accelerate) ignore it.
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
