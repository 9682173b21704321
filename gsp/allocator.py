"""Big messages without page faults: an opt-in, process-wide setting of glibc's ``malloc``.

Every message :meth:`gsp.Socket.recv` returns is a new ``bytes`` object, as with pyzmq, pynng and
the standard library's sockets. Under glibc's default settings a body of 128 KiB or more may get
its own ``mmap`` and be unmapped when freed, and free memory at the top of the heap beyond the
trim threshold (128 KiB, or twice the largest body unmapped so far) is given back to the kernel;
either way later bodies are written into pages the kernel must map and zero again. gsp's readers
keep bodies from piling up ahead of a receiver that keeps up, so a steady stream reuses its
memory; a receiver that falls behind and then drains its queue still pays: 63 page faults per
256 KiB body, draining bursts of 40 over tcp (``tests/core/test_allocator.py``), against 0 tuned.

:func:`tune_allocator` makes ``malloc`` keep that memory instead: bodies up to ``big`` bytes come
from the heap, and up to ``keep`` bytes of free heap stay mapped for the next ones. The setting is
the process's, not gsp's: every library in the process allocates under it, and the process may
hold up to ``keep`` bytes it does not use. So gsp never applies it on its own; a program that
moves big messages calls it once at start-up (or sets glibc's ``MALLOC_MMAP_THRESHOLD_`` and
``MALLOC_TRIM_THRESHOLD_`` environment variables, the same two settings, before Python starts).
Other C libraries' allocators (musl, macOS, Windows) have no such switch: there it does nothing.
"""

from __future__ import annotations

import ctypes
import platform

from .errors import BadOption

__all__ = ["MAX_BIG", "tune_allocator"]

MiB = 1 << 20
#: The largest ``big`` glibc accepts on 64-bit machines (its ``HEAP_MAX_SIZE / 2``).
MAX_BIG = 32 * MiB

# mallopt's parameter numbers, from glibc's <malloc.h>
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


def tune_allocator(big: int = 32 * 2**20, keep: int = 128 * 2**20) -> bool:
    """Make glibc's ``malloc`` serve blocks up to ``big`` bytes from its heap (not one ``mmap``
    each) and keep up to ``keep`` bytes of free heap mapped (not return it to the kernel at once);
    process-wide, see the module's text. Returns True once applied, False where the C library is
    not glibc (nothing changed). :class:`gsp.BadOption` for a value that is not an int in range
    (``0 < big <= MAX_BIG``, ``keep >= big``)."""
    for name, value in (("big", big), ("keep", keep)):
        if type(value) is not int or value <= 0:
            raise BadOption(f"tune_allocator: {name} must be a positive int, not {value!r}")
    if big > MAX_BIG:
        raise BadOption(f"tune_allocator: big is at most {MAX_BIG} (glibc's limit), not {big}")
    if keep < big:
        raise BadOption(f"tune_allocator: keep ({keep}) must be at least big ({big}), or every "
                        "freed big block would be trimmed again")
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    mallopt = ctypes.CDLL(None).mallopt
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    # Both set explicitly: either one alone turns off glibc's sliding thresholds, and the other
    # would then stay at its 128 KiB default.
    if not (mallopt(_M_MMAP_THRESHOLD, big) and mallopt(_M_TRIM_THRESHOLD, keep)):
        raise BadOption(f"tune_allocator: glibc refused big={big}, keep={keep}")
    return True
