"""Native libraries for ``gsp bench``: C nng and Go mangos, as small programs shipped here.

``nng_perf.c`` (against Debian's ``libnng-dev`` or any libnng) and ``mangos_perf/`` (a Go module
requiring ``go.nanomsg.org/mangos/v3``) play the bench's roles the way the Python libraries do
(see their sources). :func:`tool` builds one on first use into a per-user cache directory
(``$GSP_BENCH_CACHE``, else ``$XDG_CACHE_HOME/gsp/bench``, else ``~/.cache/gsp/bench``), named by
a hash of its source and build command, so a changed source or compiler builds afresh; a build
that cannot happen raises :class:`Unavailable` saying why and what to install, and the bench
skips that library.

The compilers are ``$CC`` (default ``cc``; ``$CFLAGS`` and ``$LDFLAGS`` are honoured) and
``$GO`` (default ``go``). The mangos module comes from Go's module cache or ``$GOPROXY``
(``GOPROXY=off`` builds from the cache alone), or from a checkout of mangos v3 named by
``$GSP_BENCH_MANGOS`` (a ``replace`` directive: a vendored copy, no network).
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import tempfile
from importlib import resources

__all__ = ["NATIVE", "Unavailable", "available", "cache_dir", "tool"]

#: The native libraries, by bench name: the language each is written in.
NATIVE = {"nng": "C", "mangos": "Go"}

#: The mangos module the Go tool is written against (go.mod requires this version).
MANGOS = "go.nanomsg.org/mangos/v3"
BUILD_TIMEOUT = 600.0  # seconds: a first Go build may download and compile the module


class Unavailable(Exception):
    """This native library cannot be built or run here; the message says why."""


def cache_dir() -> str:
    """Where built tools are kept (created on demand)."""
    d = os.environ.get("GSP_BENCH_CACHE")
    if not d:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        d = os.path.join(base, "gsp", "bench")
    return d


def _source(*parts: str) -> bytes:
    """A shipped source file (``parts``: its path under this package)."""
    where = resources.files(__name__)
    for part in parts:  # one at a time: Python 3.10's joinpath takes a single name
        where = where.joinpath(part)
    return where.read_bytes()


def _command(var: str, default: str) -> list[str]:
    return shlex.split(os.environ.get(var) or default)


def _tail(text: str, lines: int = 3) -> str:
    return " | ".join(ln.strip() for ln in text.strip().splitlines()[-lines:]) or "no output"


def _nng_build(out: str) -> None:
    cc = _command("CC", "cc")
    if not shutil.which(cc[0]):
        raise Unavailable(f"C compiler {cc[0]!r} not found (set $CC, or apt-get install gcc)")
    with tempfile.TemporaryDirectory(dir=os.path.dirname(out)) as tmp:
        src = os.path.join(tmp, "nng_perf.c")
        with open(src, "wb") as f:
            f.write(_source("nng_perf.c"))
        cmd = [*cc, "-O2", *shlex.split(os.environ.get("CFLAGS", "")), "-o", out, src,
               *shlex.split(os.environ.get("LDFLAGS", "")), "-lnng", "-lpthread"]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=BUILD_TIMEOUT)
    if p.returncode:
        err = p.stderr + p.stdout
        if "nng.h" in err and ("No such file" in err or "not found" in err):
            raise Unavailable("nng.h not found: apt-get install libnng-dev")
        if "-lnng" in err:
            raise Unavailable("libnng not found by the linker: apt-get install libnng-dev")
        raise Unavailable(f"{cc[0]} failed: {_tail(err)}")


def _mangos_build(out: str) -> None:
    go = _command("GO", "go")
    if not shutil.which(go[0]):
        raise Unavailable(f"Go toolchain {go[0]!r} not found: mangos needs Go (set $GO, or "
                          f"apt-get install golang-go) and the module {MANGOS}")
    with tempfile.TemporaryDirectory(dir=os.path.dirname(out)) as tmp:
        for name in ("go.mod", "main.go"):
            with open(os.path.join(tmp, name), "wb") as f:
                f.write(_source("mangos_perf", name))
        local = os.environ.get("GSP_BENCH_MANGOS")
        if local:
            with open(os.path.join(tmp, "go.mod"), "a") as f:
                f.write(f"\nreplace {MANGOS} => {os.path.abspath(local)}\n")
        p = subprocess.run([*go, "build", "-mod=mod", "-o", out, "."], cwd=tmp,
                           capture_output=True, text=True, timeout=BUILD_TIMEOUT)
    if p.returncode:
        raise Unavailable(f"go build of the mangos tool failed (is {MANGOS} in Go's module "
                          f"cache, reachable through GOPROXY, or checked out at "
                          f"$GSP_BENCH_MANGOS?): {_tail(p.stderr + p.stdout)}")


def _key(name: str) -> str:
    """What names a build: the sources and the build command's inputs."""
    h = hashlib.sha256(name.encode())
    if name == "nng":
        h.update(_source("nng_perf.c"))
        for var, default in (("CC", "cc"), ("CFLAGS", ""), ("LDFLAGS", "")):
            h.update(b"\0" + (os.environ.get(var) or default).encode())
    else:
        h.update(_source("mangos_perf", "go.mod") + _source("mangos_perf", "main.go"))
        for var, default in (("GO", "go"), ("GOFLAGS", ""), ("GSP_BENCH_MANGOS", "")):
            h.update(b"\0" + (os.environ.get(var) or default).encode())
    return h.hexdigest()[:16]


def tool(name: str) -> str:
    """The path of ``name``'s built tool (one of :data:`NATIVE`), building it if needed; raises
    :class:`Unavailable` with the reason when it cannot be built."""
    if name not in NATIVE:
        raise ValueError(f"no native library {name!r}")
    d = cache_dir()
    exe = os.path.join(d, f"{name}_perf-{_key(name)}")
    if os.access(exe, os.X_OK):
        return exe
    try:
        os.makedirs(d, exist_ok=True)
    except OSError as exc:
        raise Unavailable(f"cache directory {d}: {exc.strerror}") from None
    part = f"{exe}.{os.getpid()}.part"  # then renamed: concurrent builds never see half a file
    try:
        (_nng_build if name == "nng" else _mangos_build)(part)
        os.replace(part, exe)
    except subprocess.TimeoutExpired:
        raise Unavailable(f"building the {name} tool took over {BUILD_TIMEOUT:.0f} s") from None
    finally:
        if os.path.exists(part):
            os.unlink(part)
    return exe


def available(name: str) -> str:
    """Build ``name``'s tool if needed and check that it runs: its library's version (e.g.
    ``1.5.2``); raises :class:`Unavailable` with the reason otherwise."""
    exe = tool(name)
    try:
        p = subprocess.run([exe, "version"], capture_output=True, text=True, timeout=30)
    except OSError as exc:
        raise Unavailable(f"{exe}: {exc.strerror}") from None
    if p.returncode:
        raise Unavailable(f"the built {name} tool does not run: {_tail(p.stderr + p.stdout)}")
    return p.stdout.strip()
