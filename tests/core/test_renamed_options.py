"""Renamed options: the old name still works everywhere the new one does, with a
DeprecationWarning naming the new one and pointing at the line that used it (gsp-ws's
``ws_recv_frame_max``: plugins/gsp-ws/tests/test_ws.py)."""

from __future__ import annotations

from typing import Any, Callable

import pytest

import gsp
from gsp.testing import free_url

#: old name: (new name, a value, the protocol of a socket that has it)
RENAMED = {
    "recv_max_size": ("max_recv_size", 1234, "pull"),
    "recv_partial_max": ("max_recv_partial", 4321, "pull"),
    "ipc_send_buffer": ("ipc_send_buffer_size", 65536, "pull"),
    "reconnect_time_max": ("max_reconnect_time", 3, "push"),
    "send_buffer_bytes": ("send_buffer_size", 1 << 16, "push"),
    "recv_buffer_bytes": ("recv_buffer_size", 1 << 18, "pull"),
}


def _warns(old: str, new: str) -> Any:
    return pytest.warns(DeprecationWarning, match=f"option '{old}' is renamed '{new}'")


@pytest.fixture(params=sorted(RENAMED))
def renamed(request: pytest.FixtureRequest) -> tuple[str, str, int, str]:
    old = request.param
    new, value, proto = RENAMED[old]
    return old, new, value, proto


def test_the_old_name_as_a_keyword(gsp_socket: Callable[..., gsp.Socket],
                                   renamed: tuple[str, str, int, str]) -> None:
    old, new, value, proto = renamed
    with _warns(old, new) as caught:
        s = gsp_socket(proto, **{old: value})
    assert caught[0].filename == __file__
    assert s.get_option(new) == value and s.options[new] == value and old not in s.options


def test_the_old_name_as_an_attribute_and_in_get_set_option(
        gsp_socket: Callable[..., gsp.Socket], renamed: tuple[str, str, int, str]) -> None:
    old, new, value, proto = renamed
    s = gsp_socket(proto)
    with _warns(old, new) as caught:
        setattr(s, old, value)
    assert caught[0].filename == __file__ and getattr(s, new) == value
    assert old not in vars(s)  # set as the option, not as an attribute of its own
    with _warns(old, new):
        assert getattr(s, old) == value
    with _warns(old, new):
        s.set_option(old, value + 1)
    with _warns(old, new):
        assert s.get_option(old) == value + 1 == getattr(s, new)


def test_the_old_name_on_an_endpoint_and_read_by_a_plugin(
        gsp_socket: Callable[..., gsp.Socket], gsp_free_url: Callable[[str], str]) -> None:
    s = gsp_socket("pull")
    with _warns("recv_max_size", "max_recv_size") as caught:
        lst = s.listen(free_url("tcp"), recv_max_size=99)
    assert caught[0].filename == __file__
    assert lst.options["max_recv_size"] == 99
    with _warns("ipc_send_buffer", "ipc_send_buffer_size"):
        ipc = s.listen(gsp_free_url("ipc"), ipc_send_buffer=8192)
    assert ipc.options["ipc_send_buffer_size"] == 8192
    # A transport of a third party that still reads the old name gets the new one's value.
    with _warns("recv_max_size", "max_recv_size"):
        assert lst.options["recv_max_size"] == 99
    with _warns("recv_partial_max", "max_recv_partial"):
        assert lst.options["recv_partial_max"] == 64 << 20  # (a socket-wide one, too)


def test_old_and_new_names_together_and_unknown_names_are_refused(
        gsp_socket: Callable[..., gsp.Socket]) -> None:
    with pytest.warns(DeprecationWarning), \
            pytest.raises(gsp.BadOption, match="given twice, by its new name and its old one"):
        gsp.socket("pull", recv_max_size=1, max_recv_size=2)
    s = gsp_socket("pull")
    with pytest.raises(gsp.BadOption, match="unknown option 'recv_max_sizee'"):
        s.recv_max_sizee = 1
    with pytest.raises(gsp.BadOption, match="not an option of this endpoint"):
        s.listen(free_url("tcp"), recv_max_sizee=1)
