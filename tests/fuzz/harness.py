"""What every fuzz target shares: a fake socket fed from fuzz bytes, a chunker that splits a
stream the same way every time for one input, and ``main`` that starts atheris.

A target is ``tests/fuzz/fuzz_<name>.py`` with a ``one_input(data: bytes)`` function; it raises
:class:`Finding` (or lets any exception it does not expect escape) when an input breaks the code
under test. libFuzzer then writes the input to a ``crash-*`` file, and reproducing it is
``python tests/fuzz/fuzz_<name>.py crash-<sha1>``.

The files are named ``fuzz_*.py`` so that pytest never collects them; tests/project/test_fuzz.py runs
each one in a subprocess.
"""

from __future__ import annotations

import os
import random
import sys
import traceback
from typing import Any, Callable, Iterator, NamedTuple, Sequence

#: Modules whose code atheris instruments for coverage (the code reachable from bytes).
INSTRUMENTED = ("gsp", "gsp_ws", "gsp_spark", "wsproto", "h11", "msgpack")


class Finding(AssertionError):
    """An input broke an invariant of the code under test (not a mere refusal of bad input)."""


def chunks(data: bytes, seed: int, *, largest: int = 64) -> Iterator[bytes]:
    """``data`` cut into pieces of 1..largest bytes (sizes fixed by ``seed``), so that every
    input also tries a particular split of its stream: prefixes and bodies cut anywhere."""
    rng = random.Random(seed)
    pos = 0
    while pos < len(data):
        n = 1 + rng.randrange(largest) if seed else len(data)  # seed 0: one piece
        yield data[pos:pos + n]
        pos += n


class FakeSocket:
    """The socket a connection reads from: ``recv`` hands out the given chunks, then EOF (b"");
    what the connection writes is kept in :attr:`sent`. Socket options are accepted and
    ignored; names are those of a loopback peer."""

    def __init__(self, pieces: Iterator[bytes]) -> None:
        self._pieces = pieces
        self._pending = b""
        self.sent = bytearray()
        self.closed = False

    def recv(self, n: int) -> bytes:
        data = self._pending or next(self._pieces, b"")
        self._pending = data[n:]
        return data[:n]

    def recv_into(self, buf: Any, n: int = 0) -> int:
        view = memoryview(buf)
        want = len(view) if not n else min(n, len(view))
        data = self.recv(want)
        view[:len(data)] = data
        return len(data)

    def send(self, data: Any, *args: Any) -> int:
        self.sent += data
        return len(data)

    def sendall(self, data: Any) -> None:
        self.sent += data

    def setsockopt(self, *args: Any) -> None:
        pass

    def getsockname(self) -> tuple[str, int]:
        return ("127.0.0.1", 5555)

    def getpeername(self) -> tuple[str, int]:
        return ("127.0.0.1", 40000)

    def fileno(self) -> int:
        return -1

    def close(self) -> None:
        self.closed = True


def expect(condition: bool, what: str) -> None:
    """Raise :class:`Finding` saying ``what`` when ``condition`` is false (asserts vanish under
    ``python -O``; this does not)."""
    if not condition:
        raise Finding(what)


_POWERS = {10 ** i for i in range(10)}


class Known(NamedTuple):
    """A finding already reported and not fixed yet (in code this branch does not own): an
    exception of type ``exc`` raised in a function named ``function`` whose message contains
    ``text``. The fuzzer counts it and carries on instead of stopping there, so a bounded run
    still explores everything else; ``GSP_FUZZ_STRICT=1`` turns it back into a crash, which is
    how its reproducer (tests/fuzz/findings/) is replayed. Delete the entry once it is fixed."""

    name: str
    exc: type[BaseException]
    function: str
    text: str = ""

    def matches(self, exc: BaseException) -> bool:
        if not isinstance(exc, self.exc) or self.text not in str(exc):
            return False
        return any(f.name == self.function for f in traceback.extract_tb(exc.__traceback__))


def tolerate(one_input: Callable[[bytes], None],
             known: Sequence[Known]) -> Callable[[bytes], None]:
    """``one_input`` that counts the ``known`` findings instead of raising them."""
    if not known or os.environ.get("GSP_FUZZ_STRICT") == "1":
        return one_input
    hits = dict.fromkeys((k.name for k in known), 0)

    def guarded(data: bytes) -> None:
        try:
            one_input(data)
        except Exception as exc:
            k = next((k for k in known if k.matches(exc)), None)
            if k is None:
                raise
            n = hits[k.name] = hits[k.name] + 1
            if n in _POWERS:  # libFuzzer ends the process with exit(): no atexit report
                print(f"KNOWN finding {k.name!r} hit {n} times (GSP_FUZZ_STRICT=1 stops on it)",
                      file=sys.stderr)

    return guarded


def main(one_input: Callable[[bytes], None], known: Sequence[Known] = ()) -> None:
    """Run ``one_input`` under libFuzzer with the command line's corpus dirs and flags."""
    import atheris

    dirs = [a for a in sys.argv[1:] if not a.startswith("-") and os.path.isdir(a)]
    seeds = os.path.realpath(os.path.join(os.path.dirname(__file__), "corpus"))
    if dirs and os.path.realpath(dirs[0]).startswith(seeds + os.sep):
        sys.exit("the first corpus directory receives every new input: put a scratch directory "
                 f"before the seed corpus {dirs[0]} (see tests/fuzz/campaign.sh)")

    atheris.Setup(sys.argv, tolerate(one_input, known))
    atheris.Fuzz()
