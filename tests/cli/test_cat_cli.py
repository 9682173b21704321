"""``gsp cat``'s output formats (each parsed back to what was sent), its argument checks and its
errors; ``gsp --version``; what ``gsp --help`` and ``gsp bench --help`` list."""

from __future__ import annotations

import ast
import pathlib
import signal
import subprocess
import sys
from typing import Callable, Iterator

import msgpack
import pytest

import gsp
from gsp.cat import main
from tests.support import nng
from tests.support.catkit import Cats, cats_fixture, finish, listening

#: Every byte value, and the characters the quoted format escapes by name.
BODY = bytes(range(256)) + b'"\\\n\r\t end'
SECOND = b"second"
OBJ = {"text": "ünï ☃", "blob": b"\x00\xff", "list": [1, -2, 3.5, None, True], 7: {b"k": []}}


@pytest.fixture
def cats() -> Iterator[Cats]:
    yield from cats_fixture()


def c_string(line: bytes) -> bytes:
    """Parse one line of --quoted/--hex output (a C string literal) back into bytes."""
    assert line.startswith(b'"') and line.endswith(b'"'), line
    value = ast.literal_eval("b" + line.decode("ascii"))  # Python reads these C escapes alike
    assert isinstance(value, bytes)
    return value


def received_by_cat(cats: Cats, url: str, fmt: str, bodies: list[bytes]) -> bytes:
    """What a gsp cat pull printed, in ``fmt``, for ``bodies`` sent by a pynng push."""
    p = cats.start("--pull", "--listen", url, "--count", str(len(bodies)), "--format", fmt)
    with nng.socket("push") as push:
        push.dial(url, block=False)
        for body in bodies:
            push.send(body)
        code, out, err = finish(p)
    assert (code, err) == (0, ""), err
    return out


@pytest.mark.interop("nngcat", "pynng")
@pytest.mark.parametrize("fmt", ["raw", "quoted", "hex", "msgpack", "ascii", "no"])
def test_every_format_parses_back_to_the_bytes_sent(cats: Cats, fmt: str,
                                                    gsp_free_url: Callable[[str], str]) -> None:
    out = received_by_cat(cats, gsp_free_url("tcp"), fmt, [BODY, SECOND])
    if fmt == "raw":
        assert out == BODY + SECOND
    elif fmt in ("quoted", "hex"):
        lines = out.split(b"\n")
        assert lines[2:] == [b""] and [c_string(x) for x in lines[:2]] == [BODY, SECOND]
        if fmt == "hex":
            assert lines[1] == b'"' + b"".join(b"\\x%02x" % c for c in SECOND) + b'"'
        else:
            assert lines[1] == b'"second"' and b" end" in lines[0]  # printable stays as is
    elif fmt == "msgpack":
        unpacker = msgpack.Unpacker()
        unpacker.feed(out)
        assert list(unpacker) == [BODY, SECOND]  # each body one msgpack bin, back to back
        assert out.startswith(b"\xc5" + len(BODY).to_bytes(2, "big"))  # bin16, as nngcat's
    elif fmt == "ascii":
        printable = bytes(c if 0x20 <= c < 0x7F else 0x2E for c in BODY)
        assert out == printable + b"\n" + SECOND + b"\n"
    else:
        assert out == b""  # the default, as in nngcat: receive, print nothing


@pytest.mark.interop
def test_object_format_decodes_msgpack_bodies(cats: Cats,
                                              gsp_free_url: Callable[[str], str]) -> None:
    bodies = [msgpack.packb(OBJ, use_bin_type=True), b"\xc1", msgpack.packb("last")]
    p = cats.start("--pull", "--listen", (url := gsp_free_url("ipc")), "-C", "3", "--object")
    with nng.socket("push") as push:
        push.dial(url, block=False)
        for body in bodies:
            push.send(body)
        code, out, err = finish(p)
    assert code == 0
    assert [ast.literal_eval(line) for line in out.decode().splitlines()] == [OBJ, "last"]
    # a body that is no msgpack is reported and skipped; the others still print
    assert err.startswith("gsp cat: message 2: ") and "BadMessage" not in out.decode()
    assert "not one msgpack object" in err


@pytest.mark.interop
def test_data_object_is_sent_as_send_obj_would(cats: Cats,
                                               gsp_free_url: Callable[[str], str]) -> None:
    url = gsp_free_url("tcp")
    with nng.socket("pull") as pull:
        pull.listen(url)
        assert cats.run("--push", "--dial", url, "--data-object", repr(OBJ)) == (0, b"", "")
        assert pull.recv() == msgpack.packb(OBJ, use_bin_type=True)


@pytest.mark.interop
def test_file_and_stdin_data(cats: Cats, gsp_free_url: Callable[[str], str],
                             tmp_path: pathlib.Path) -> None:
    url = gsp_free_url("tcp")
    (tmp_path / "body").write_bytes(BODY)
    with nng.socket("pull") as pull:
        pull.listen(url)
        assert cats.run("--push", "--dial", url, "--file", str(tmp_path / "body")) == (0, b"", "")
        assert pull.recv() == BODY
        p = subprocess.run([sys.executable, "-m", "gsp", "cat", "--push", "--dial", url,
                            "-F", "-"], input=SECOND, capture_output=True, timeout=30)
        assert (p.returncode, p.stderr) == (0, b"")
        assert pull.recv() == SECOND


@pytest.mark.interop("nngcat", "pynng")
@pytest.mark.parametrize("fmt, body, printed", [
    ("quoted", b'a"\\\n\x00\x7f', b'"a\\"\\\\\\n\\x00\\x7f"\n'),
    ("hex", b"\x00A", b'"\\x00\\x41"\n'),
    ("msgpack", b"x" * 3, b"\xc4\x03xxx"),
    ("msgpack", b"x" * 70000, b"\xc6\x00\x01\x11\x70" + b"x" * 70000),
    ("raw", b"\x00", b"\x00"),
], ids=["quoted", "hex", "msgpack-bin8", "msgpack-bin32", "raw"])
def test_formats_match_nngcat_byte_for_byte(cats: Cats, fmt: str, body: bytes, printed: bytes,
                                            gsp_free_url: Callable[[str], str]) -> None:
    assert received_by_cat(cats, gsp_free_url("tcp"), fmt, [body]) == printed


# -- arguments and errors ------------------------------------------------------------------------

@pytest.mark.parametrize("args, message", [
    ([], "no protocol given"),
    (["--push", "-D", "x"], "no address given"),
    (["--push", "--pull", "--dial", "tcp://127.0.0.1:1"], "only one protocol"),
    (["--push", "--dial", "tcp://127.0.0.1:1"], "push needs --data or --file"),
    (["--req", "--dial", "tcp://127.0.0.1:1"], "req needs --data or --file"),
    (["--pull", "--dial", "tcp://127.0.0.1:1", "-D", "x"], "pull cannot send"),
    (["--pull", "--dial", "tcp://127.0.0.1:1", "--subscribe", "a"], "--subscribe is for --sub"),
    (["--pub", "--dial", "tcp://127.0.0.1:1", "-D", "x", "--hex"], "pub receives nothing"),
    (["--rep", "--dial", "tcp://127.0.0.1:1", "-i", "1"], "rep does not take --interval"),
    (["--bus", "--dial", "tcp://127.0.0.1:1", "-i", "1"], "--interval needs --data"),
    (["--sub", "--dial", "tcp://127.0.0.1:1", "--hex", "--raw"], "only one output format"),
    (["--push", "--dial", "tcp://127.0.0.1:1", "-D", "x", "-F", "y"], "only one of --data"),
    (["--push", "--dial", "tcp://127.0.0.1:1", "-D", "x", "--count", "-1"], "whole number"),
    (["--push", "--dial", "tcp://127.0.0.1:1", "-D", "x", "-i", "soon"], "seconds expected"),
    (["--sub", "--dial", "tcp://127.0.0.1:1", "--format", "xml"], "invalid choice"),
    (["--protocol", "nope", "--dial", "tcp://127.0.0.1:1"], "unknown protocol 'nope'"),
    (["--push", "--dial", "tcp://127.0.0.1:1", "--data-object", "{1,"], "--data-object"),
    (["--push", "--dial", "tcp://127.0.0.1:1", "--data-object", "{1, 2}"], "cannot encode set"),
    (["--pull", "--dial", "tcp://127.0.0.1:1", "--compat"], "unrecognized arguments"),
])
def test_bad_arguments_exit_2_with_one_clear_line(args: list[str], message: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(args)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: gsp cat ")
    last = err.splitlines()[-1]
    assert last.startswith("gsp cat: error: ") and message in last, err


def test_bad_arguments_from_the_shell(cats: Cats) -> None:
    code, out, err = cats.run("--push", "--dial", "tcp://127.0.0.1:1")
    assert (code, out) == (2, b"") and err.splitlines()[-1].endswith("push needs --data or --file")


@pytest.mark.parametrize("args, message", [
    (["--push", "--dial", "tcp://127.0.0.1:{port}", "-D", "x"],
     "dial tcp://127.0.0.1:{port}: connection refused (gsp.ConnectionRefused)"),
    (["--pull", "--dial", "nope://x"], "no transport for 'nope' in 'nope://x'"),
    (["--pull", "--listen", "tcp://127.0.0.1:{port}", "--recv-timeout", "0.2"],
     "nothing received within --recv-timeout 0.2 s (gsp.Timeout)"),
    (["--surveyor", "--listen", "tcp://127.0.0.1:{port}", "-D", "x", "--recv-timeout", "0.2"],
     "nothing received within --recv-timeout 0.2 s (gsp.Timeout)"),
    (["--req", "--listen", "tcp://127.0.0.1:{port}", "-D", "x", "--send-timeout", "0.2"],
     "timed out after"),  # REQ waits for a peer to send to
    (["--push", "--listen", "tcp://127.0.0.1:{port}", "-D", "x", "--send-timeout", "0.2"],
     "(gsp.Timeout)"),
    (["--pull", "--listen", "tcp://127.0.0.1:{port}", "-o", "recv_timeot=1"],
     "unknown option 'recv_timeot'"),
    (["--push", "--dial", "tcp://127.0.0.1:{port}", "-F", "/nonexistent/gsp-cat"],
     "cannot read --file /nonexistent/gsp-cat: No such file or directory"),
])
def test_failures_exit_1_with_gsps_error_text(cats: Cats, args: list[str], message: str) -> None:
    port = str(gsp.testing.free_port())
    code, out, err = cats.run(*(a.replace("{port}", port) for a in args))
    assert (code, out) == (1, b"")
    assert err.startswith("gsp cat: ") and err.count("\n") == 1, err
    assert message.replace("{port}", port) in err, err


def test_silent_keeps_stderr_empty_but_not_the_status(cats: Cats) -> None:
    port = gsp.testing.free_port()
    assert cats.run("-q", "--pull", "--dial", f"tcp://127.0.0.1:{port}") == (1, b"", "")


@pytest.mark.plugins("gsp_bench", "gsp_star")
def test_version_and_help(cats: Cats) -> None:
    def gsp_cmd(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "gsp", *args], capture_output=True,
                              text=True, timeout=60)

    assert gsp_cmd("--version").stdout == f"gsp {gsp.__version__}\n"
    assert gsp_cmd("cat", "--version").stdout == f"gsp {gsp.__version__}\n"
    top = gsp_cmd("--help").stdout
    assert "cat" in top and "bench" in top and "info" in top
    cat_help = gsp_cmd("cat", "--help").stdout
    for name in gsp.protocol_names():  # every installed protocol, plugins included, has its flag
        assert f"--{name}" in cat_help
    for flag in ("--dial", "--listen", "--raw", "--quoted", "--hex", "--msgpack", "--count",
                 "--interval", "--delay", "--subscribe", "--recv-timeout", "--send-timeout",
                 "--cert", "--key", "--cacert", "--insecure", "--silent", "--protocol"):
        assert flag in cat_help
    bench = gsp_cmd("bench", "--help")
    assert bench.returncode == 0
    assert "SUPPRESS" not in bench.stdout and "_worker" not in bench.stdout


def test_ctrl_c_exits_130_quietly(cats: Cats) -> None:
    p = cats.start("-v", "--pull", "--listen", "tcp://127.0.0.1:0", "--quoted")
    listening(p)
    p.send_signal(signal.SIGINT)
    assert finish(p) == (130, b"", "")
