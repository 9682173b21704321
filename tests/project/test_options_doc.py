"""docs/options.md is generated from the option specs and must match them; the specs' validators
describe themselves (type, unit, range) and still validate as before."""

from __future__ import annotations

import pathlib
from typing import Any, Callable

import pytest

import gsp
from gsp.options import (
    ENDPOINT_OPTIONS,
    SOCKET_OPTIONS,
    Check,
    Option,
    boolean,
    described,
    duration,
    instance_of,
    integer,
    optional,
)
from scripts import docgen as _docs
from scripts.docgen import main

pytestmark = pytest.mark.plugins

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "options.md"


def test_docs_options_md_is_up_to_date() -> None:
    fresh = _docs.options_markdown()
    assert DOC.read_text(encoding="utf-8") == fresh, (
        f"docs/options.md is stale: regenerate it with `{_docs.COMMAND}` at the repository root")


@pytest.mark.parametrize("command, make, quoted", [
    ("options", _docs.options_markdown, _docs.COMMAND),  # docs/options.md
    ("hooks", _docs.reference_markdown, _docs.REFERENCE_COMMAND),  # docs/plugin-reference.md
])
def test_the_command_writes_what_the_test_compares(command: str, make: Any, quoted: str,
                                                   tmp_path: Any, capsys: Any) -> None:
    out = tmp_path / "out.md"
    assert main([command, "-o", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == make()
    assert main([command]) == 0
    assert capsys.readouterr().out == make()
    assert quoted in make()


def _rows(text: str) -> dict[str, list[list[str]]]:
    """Option name -> the cells of its table rows."""
    rows: dict[str, list[list[str]]] = {}
    for line in text.splitlines():
        if line.startswith("| `"):
            cells = [c.strip() for c in line.strip("|").split(" | ")]
            rows.setdefault(cells[0].strip("`"), []).append(cells)
    return rows


def test_every_shipped_option_is_documented_with_its_spec() -> None:
    rows = _rows(_docs.options_markdown())
    for o in SOCKET_OPTIONS.values():
        [cells] = rows[o.name]
        scope = "socket" if o.name not in ENDPOINT_OPTIONS else \
            "socket, listen, dial" if o.scope is None else f"socket, {o.scope}"
        assert cells[1:6] == [o.type, o.unit, f"`{o.default!r}`", o.range, scope]
    for name, spec in gsp.registry.protocols.items():
        if name in ("scatter", "gather"):  # the example plugin: only with --all
            continue
        for o in spec.options.values():
            assert any(f"`{name}`" in c[1] and c[2] == o.type and c[6] == o.doc
                       for c in rows[o.name]), (name, o)
    for scheme, t in gsp.registry.transports.items():
        if scheme == "tcp+zlib":
            continue
        for o in t.options.values():
            assert any(f"`{scheme}`" in c[1] and c[5] == o.range for c in rows[o.name]), (scheme, o)
    assert "zlib_level" not in rows and "redeliver" not in rows
    everything = _rows(_docs.options_markdown(include_all=True))
    assert "(gevent-sp-example-zlib)" in everything["zlib_level"][0][1]
    assert "`scatter` (gevent-sp-example-gather)" == everything["redeliver"][0][1]


def test_same_spec_under_several_owners_is_one_row_naming_them() -> None:
    rows = _rows(_docs.options_markdown())
    assert [c[1] for c in rows["tcp_nodelay"]] == ["`tcp`, `tls+tcp`"]
    assert [c[1] for c in rows["ttl"]] == ["`pair1`", "`rep`, `respondent`",
                                            "`star` (gevent-sp-star)"]
    assert rows["ssl_context"][0][1] == "`tls+tcp`; `ws`, `ws+wsgi`, `wss` (gevent-sp-ws)"


def test_every_installed_option_describes_its_type() -> None:
    specs: list[Option] = [*SOCKET_OPTIONS.values()]
    for spec in gsp.registry.protocols.values():
        specs += spec.options.values()
    for t in gsp.registry.transports.values():
        specs += t.options.values()
    for o in specs:
        assert isinstance(o.validate, Check) and o.type, o
        o.validate(o.name, o.default)  # every default passes its own validator


def test_validators_describe_what_they_accept() -> None:
    assert (integer(1, 255).type, integer(1, 255).range) == ("int", "1..255")
    assert integer(0, unit="bytes").range == ">= 0" and integer(0, unit="bytes").unit == "bytes"
    d = duration(allow_none=False, allow_zero=False)
    assert (d.type, d.unit, d.range) == ("float", "s", "> 0")
    assert (duration().type, duration().range) == ("float or None", ">= 0")
    o = optional(integer(0, 7, unit="bits"))
    assert (o.type, o.unit, o.range) == ("int or None", "bits", "0..7")
    assert optional(duration()).type == "float or None"
    assert instance_of(int, str).type == "int or str" and boolean.type == "bool"
    assert Option("x", 3, integer(1, 9, unit="s")).unit == "s"
    assert Option("y", 0, lambda name, v: v).type == ""  # a bare function says nothing


def test_described_validators_still_validate(gsp_socket: Callable[..., gsp.Socket]) -> None:
    @described("str", range="'a', 'b'")
    def ab(name: str, v: Any) -> Any:
        if v not in ("a", "b"):
            raise gsp.BadOption(f"{name} must be 'a' or 'b'")
        return v

    assert (ab.type, ab.unit, ab.range) == ("str", "", "'a', 'b'") and ab("n", "a") == "a"
    with pytest.raises(gsp.BadOption, match="n must be 'a' or 'b'"):
        ab("n", "c")
    with pytest.raises(gsp.BadOption, match=r"must be an int in 1\.\.255, not 0"):
        integer(1, 255)("ttl", 0)
    with pytest.raises(gsp.BadOption, match="must be True or False"):
        boolean("best_effort", 1)
    assert optional(integer(0))("x", None) is None and duration()("t", 2) == 2.0
    s = gsp_socket("pair1", ttl=200)
    assert s.ttl == 200
    with pytest.raises(gsp.BadOption):
        s.ttl = 256
