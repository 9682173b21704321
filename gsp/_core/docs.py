"""The options reference (docs/options.md), generated from the option specs.

Socket-wide options come from :data:`gsp.options.SOCKET_OPTIONS` (those in
:data:`gsp.options.ENDPOINT_OPTIONS` are also accepted by ``listen``/``dial``), protocol and
transport options from the registry (``gsp.registry.protocols[name].options``,
``gsp.registry.transports[scheme].options``). Type, unit and range are what each option's
validator says about itself (:class:`gsp.options.Check`).

Regenerate with ``python -m gsp options -o docs/options.md``.
"""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import Any, Iterable

from ..options import ENDPOINT_OPTIONS, SOCKET_OPTIONS, Option

#: The command that writes docs/options.md (quoted by the file and by its staleness test).
COMMAND = "python -m gsp options -o docs/options.md"
#: gsp's own distribution and the plugin distributions shipped beside it (not the examples).
SHIPPED = ("gevent-sp", "gevent-sp-star", "gevent-sp-ws")
_CORE = SHIPPED[0]


def origins(hook: str) -> dict[str, str | None]:
    """Protocol name or URL scheme -> the distribution whose ``gsp`` entry point registered the
    plugin answering ``hook`` with it (None: a plugin registered by hand)."""
    from .registry import registry

    registry.protocols  # noqa: B018 (loads the entry points' plugins, once)
    dist_of = {ep.value: ep.dist.name for ep in entry_points(group="gsp") if ep.dist is not None}
    out: dict[str, str | None] = {}
    for impl in getattr(registry.pm.hook, hook).get_hookimpls():
        dist = dist_of.get(impl.plugin_name)
        for item in impl.function() or ():
            for key in getattr(item, "schemes", None) or (item.name,):
                out[key] = dist
    return out


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _default(value: Any) -> str:
    return f"`{value!r}`"


def _columns(o: Option) -> list[str]:
    return [_cell(o.type) or "any", o.unit, _default(o.default), _cell(o.range)]


def _table(head: list[str], rows: Iterable[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


def _owners(owners: list[tuple[str, str]]) -> str:
    """``(distribution, name)`` pairs as "`a`, `b`; `c` (dist)": gsp's own first, then by name."""
    by_dist: dict[str, list[str]] = {}
    for dist, name in owners:
        by_dist.setdefault(dist, []).append(name)
    parts = []
    for dist in sorted(by_dist, key=lambda d: (d != _CORE, d)):
        names = ", ".join(f"`{n}`" for n in sorted(by_dist[dist]))
        parts.append(names if dist == _CORE else f"{names} ({dist})")
    return "; ".join(parts)


def _grouped(owned: list[tuple[str, str, Option]]) -> list[tuple[Option, str]]:
    """``(distribution, owner, option)``: options that are the same spec (name, default,
    validator description, doc) under several owners become one row naming them all."""
    groups: dict[tuple[str, ...], tuple[Option, list[tuple[str, str]]]] = {}
    for dist, owner, o in owned:
        key = (o.name, repr(o.default), o.type, o.unit, o.range, o.doc)
        groups.setdefault(key, (o, []))[1].append((dist, owner))
    rows = [(o, _owners(owners)) for o, owners in groups.values()]
    return sorted(rows, key=lambda r: (r[0].name, r[1]))


def options_markdown(include_all: bool = False) -> str:
    """docs/options.md: every option of gsp and its shipped plugins (``include_all``: of every
    installed plugin, the examples and third parties' too)."""
    from .registry import registry

    def keep(dist: str | None) -> str | None:
        if include_all:
            return dist or "registered by hand"
        return dist if dist in SHIPPED else None

    protocol_dist = origins("gsp_protocols")
    protocol_rows: list[tuple[str, str, Option]] = []
    for name, spec in registry.protocols.items():
        dist = keep(protocol_dist.get(name))
        if dist is not None:
            protocol_rows += [(dist, name, o) for o in spec.options.values()]

    transport_dist = origins("gsp_transports")
    transport_rows: list[tuple[str, str, Option]] = []
    for scheme, t in registry.transports.items():
        dist = keep(transport_dist.get(scheme))
        if dist is not None:
            transport_rows += [(dist, scheme, o) for o in t.options.values()]

    head = ["Type", "Unit", "Default", "Range"]
    out = [
        "# Options reference",
        "",
        f"<!-- Generated from the option specs by `{COMMAND}`; do not edit by hand",
        "(tests/test_options_doc.py fails when this file is stale). -->",
        "",
        "Options are keyword arguments of `gsp.socket(...)`, attributes of the socket",
        "(`sock.recv_timeout = 5`) or `get_option`/`set_option`; a bad value raises",
        "`gsp.BadOption` and changes nothing. Durations are seconds (int or float). *Range* is what",
        "the option's validator accepts; `None` is accepted only where *Type* says so.",
        "",
        "## Every socket",
        "",
        "*Scope* `socket` options belong to the socket; `socket, listen, dial` ones may also be",
        "given to `listen(url, **options)` / `dial(url, **options)` for that endpoint alone, which",
        "otherwise follows the socket's value (also when it changes later).",
        "",
    ]
    out += _table(["Option", *head, "Scope", "Description"], (
        [f"`{o.name}`", *_columns(o),
         "socket, listen, dial" if o.name in ENDPOINT_OPTIONS else "socket", _cell(o.doc)]
        for o in SOCKET_OPTIONS.values()))
    out += [
        "",
        "## Per protocol",
        "",
        "Sockets of these protocols have these options too. `resend_time` (req) and `survey_time`",
        "(surveyor) are per context as well: a context follows the socket's value until set on",
        "the context (`ctx.resend_time = 2`), as do `recv_timeout` and `send_timeout`.",
        "",
    ]
    out += _table(["Option", "Protocols", *head, "Description"], (
        [f"`{o.name}`", owners, *_columns(o), _cell(o.doc)]
        for o, owners in _grouped(protocol_rows)))
    out += [
        "",
        "## Per transport",
        "",
        "`listen`/`dial` on a URL of these schemes take these options; every socket takes them",
        "too, as defaults for its endpoints.",
        "",
    ]
    out += _table(["Option", "Transports", *head, "Description"], (
        [f"`{o.name}`", owners, *_columns(o), _cell(o.doc)]
        for o, owners in _grouped(transport_rows)))
    return "\n".join(out) + "\n"
