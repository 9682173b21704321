"""The generated references: options (docs/options.md, from the option specs), plugin hooks
(docs/plugin-reference.md, from the SDK's docstrings: :func:`reference_markdown`, below) and the
layers and module map of docs/architecture.md (from the import-linter contracts in pyproject.toml
and the modules' docstrings: :func:`architecture_markdown`).

Socket-wide options come from :data:`gsp.options.SOCKET_OPTIONS` (those in
:data:`gsp.options.ENDPOINT_OPTIONS` are also accepted by ``listen``/``dial``), protocol and
transport options from the registry (``gsp.registry.protocols[name].options``,
``gsp.registry.transports[scheme].options``). Type, unit and range are what each option's
validator says about itself (:class:`gsp.options.Check`).

Regenerate with ``python scripts/docgen.py options -o docs/options.md`` and
``python scripts/docgen.py hooks -o docs/plugin-reference.md`` at the repository root (``--all``
adds every installed plugin's options), and ``python scripts/docgen.py architecture -o
docs/architecture.md`` (which rewrites only the page's generated blocks);
tests/project/test_options_doc.py, tests/project/test_plugin_reference.py and
tests/project/test_architecture_doc.py fail while a file is stale. A docs build imports this module
from the repository root (``from scripts import docgen``) and calls :func:`options_markdown` and
:func:`reference_markdown`. It is a tool of the repository, not part of the installed ``gsp``.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import re
import sys
import textwrap
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Iterable

from gsp.options import ENDPOINT_OPTIONS, SOCKET_OPTIONS, Option

if sys.version_info >= (3, 11):
    import tomllib
else:  # the docs extra installs tomli there (and import-linter, of the test extra, needs it)
    import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]

#: The command that writes docs/options.md (quoted by the file and by its staleness test).
COMMAND = "python scripts/docgen.py options -o docs/options.md"
#: gsp's own distribution and the plugin distributions shipped beside it (not the examples).
SHIPPED = ("gevent-sp", "gevent-sp-star", "gevent-sp-ws")
_CORE = SHIPPED[0]


def origins(hook: str) -> dict[str, str | None]:
    """Protocol name or URL scheme -> the distribution whose ``gsp`` entry point registered the
    plugin answering ``hook`` with it (None: a plugin registered by hand)."""
    from gsp import registry

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


def _socket_scope(o: Option) -> str:
    """Where a socket option may be given: the socket, and which endpoints too."""
    if o.name not in ENDPOINT_OPTIONS:
        return "socket"
    return "socket, listen, dial" if o.scope is None else f"socket, {o.scope}"


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
    from gsp import registry

    def keep(dist: str | None) -> str | None:
        if include_all:
            return dist or "registered by hand"
        return dist if dist in SHIPPED else None

    def owned(hook: str, owners: dict[str, Any]) -> list[tuple[str, str, Option]]:
        """``(distribution, owner, option)`` of every option of ``owners`` (protocols by name,
        transports by scheme) that the page lists."""
        dist_of = origins(hook)
        rows: list[tuple[str, str, Option]] = []
        for name, owner in owners.items():
            dist = keep(dist_of.get(name))
            if dist is not None:
                rows += [(dist, name, o) for o in owner.options.values()]
        return rows

    protocol_rows = owned("gsp_protocols", registry.protocols)
    transport_rows = owned("gsp_transports", registry.transports)

    head = ["Type", "Unit", "Default", "Range"]
    out = [
        "# Options reference",
        "",
        f"<!-- Generated from the option specs by `{COMMAND}`; do not edit by hand",
        "(tests/project/test_options_doc.py fails when this file is stale). -->",
        "",
        "Options are keyword arguments of `gsp.socket(...)`, attributes of the socket",
        "(`sock.recv_timeout = 5`) or `get_option`/`set_option`; a bad value raises",
        "`gsp.BadOption` and changes nothing. Durations are seconds, however large: an int, a",
        "float or a `datetime.timedelta` (nng's options are milliseconds; gsp's are not).",
        "*Range* is what the option's validator accepts; `None` is accepted only where *Type*",
        "says so.",
        "",
        "## Every socket",
        "",
        "*Scope* `socket` options belong to the socket; `socket, listen, dial` ones may also be",
        "given to `listen(url, **options)` / `dial(url, **options)` for that endpoint alone, which",
        "otherwise follows the socket's value (also when it changes later); `socket, listen`",
        "ones to `listen` only.",
        "",
    ]
    out += _table(["Option", *head, "Scope", "Description"], (
        [f"`{o.name}`", *_columns(o),
         _socket_scope(o), _cell(o.doc)]
        for o in SOCKET_OPTIONS.values()))

    def per_owner(kind: str, intro: list[str], rows: list[tuple[str, str, Option]]) -> list[str]:
        """The section of the options of each ``kind`` (protocol, transport)."""
        return ["", f"## Per {kind}", "", *intro, "", *_table(
            ["Option", f"{kind.capitalize()}s", *head, "Description"],
            ([f"`{o.name}`", owners, *_columns(o), _cell(o.doc)] for o, owners in _grouped(rows)))]

    out += per_owner("protocol", [
        "Sockets of these protocols have these options too. `resend_time` (req) and `survey_time`",
        "(surveyor) are per context as well, as are `recv_timeout` and `send_timeout`: a context",
        "copies the socket's value when it opens (a later change on the socket does not reach it)",
        "and is changed on the context itself (`ctx.resend_time = 2`).",
    ], protocol_rows)
    out += per_owner("transport", [
        "`listen`/`dial` on a URL of these schemes take these options; every socket takes them",
        "too, as defaults for its endpoints.",
    ], transport_rows)
    return "\n".join(out) + "\n"


# -- the plugin hook reference (docs/plugin-reference.md) ------------------------------------------

#: The command that writes docs/plugin-reference.md (quoted by the file and by its staleness test).
REFERENCE_COMMAND = "python scripts/docgen.py hooks -o docs/plugin-reference.md"

#: What the reference documents: ``(section title, module, names)``. A name ``"sub.*"`` stands
#: for every function in the ``__all__`` of ``module.sub`` (so a renamed helper follows).
REFERENCE: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("The pluggy hooks (`gsp.hookspecs`)", "gsp.hookspecs",
     ("gsp_transports", "gsp_protocols", "gsp_pipe_event")),
    ("The protocol SDK (`gsp.protocol`)", "gsp.protocol",
     ("overrides", "check_op", "ProtocolSpec", "Protocol", "RejectPipe", "SocketHandle",
      "PipeHandle", "RecvQueue",
      "LendingWait", "ProtocolContext", "ContextHost", "Wakeup", "RoundRobin", "PipeMap", "routing.*")),
    ("The transport SDK (`gsp.transport`)", "gsp.transport",
     ("Transport", "TransportListener", "TransportDialer", "Connection", "StreamConnection",
      "SocketListener", "SocketDialer")),
)
#: The members shown of a class, where not every public name it defines (plus its
#: ``OPTIONAL_HOOKS`` and ``#:``-commented attributes): a class that is also user API.
MEMBERS: dict[str, tuple[str, ...]] = {
    "ProtocolSpec": (),
    "RejectPipe": (),
    "ProtocolContext": ("OPTIONAL_HOOKS", "do_send", "do_recv", "do_send_body", "do_recv_body",
                        "do_poll", "do_wake_cases", "on_close", "closing_case", "own_options",
                        "closed"),
    "ContextHost": ("closed", "host_contexts", "new_context", "send_body", "recv_body", "forget",
                    "close_contexts"),
}

_ROLE = re.compile(r":(?:class|meth|func|attr|data|mod|exc|obj):`~?([^`]+)`")


def _md(doc: str) -> str:
    """A docstring's reST as Markdown: ``x`` and :role:`x` become `x`; ``::`` blocks fenced."""
    text = _ROLE.sub(r"`\1`", doc).replace("``", "`")
    out: list[str] = []
    block = False
    for line in text.splitlines():
        if block and line and not line.startswith("    "):
            out.append("```")
            block = False
        if block:
            out.append(line[4:])
            continue
        if line.endswith("::"):
            out += [line[:-1], "", "```python"]
            block = True
            continue
        out.append(line)
    if block:
        out.append("```")
    return "\n".join(out).strip()


def _annotation(a: Any) -> str:
    if isinstance(a, str):
        return a[1:-1] if len(a) > 1 and a[0] == a[-1] and a[0] in "'\"" else a
    return inspect.formatannotation(a)


def _signature(fn: Any) -> str:
    """``(a: T, b=1) -> R``, without ``self``/``cls`` and with the annotations as written."""
    sig = inspect.signature(fn)
    params = []
    for p in sig.parameters.values():
        if p.name in ("self", "cls"):
            continue
        stars = "*" if p.kind is p.VAR_POSITIONAL else "**" if p.kind is p.VAR_KEYWORD else ""
        text = stars + p.name
        if p.annotation is not p.empty:
            text += f": {_annotation(p.annotation)}"
        if p.default is not p.empty:
            text += f" = {p.default!r}" if p.annotation is not p.empty else f"={p.default!r}"
        params.append(text)
    ret = "" if sig.return_annotation is sig.empty else f" -> {_annotation(sig.return_annotation)}"
    return f"({', '.join(params)}){ret}"


def _assigned(cls_node: ast.ClassDef) -> list[tuple[str, int]]:
    """``(name, line)`` of every assignment in a class body and of every ``self.name = ...`` in
    its ``__init__``."""
    found: list[tuple[str, int]] = []
    for node in cls_node.body:
        in_init = isinstance(node, ast.FunctionDef) and node.name == "__init__"
        for stmt in node.body if isinstance(node, ast.FunctionDef) and in_init else [node]:
            targets = [stmt.target] if isinstance(stmt, ast.AnnAssign) else \
                stmt.targets if isinstance(stmt, ast.Assign) else []
            for t in targets:
                if in_init and isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) \
                        and t.value.id == "self":
                    found.append((t.attr, stmt.lineno))
                elif not in_init and isinstance(t, ast.Name):
                    found.append((t.id, stmt.lineno))
    return found


def attribute_docs(cls: type) -> dict[str, str]:
    """Public attribute name -> its ``#:`` comment, from ``cls``'s body and its ``__init__``'s
    ``self.name = ...`` (the attributes documented the way Sphinx reads them)."""
    try:
        lines, _ = inspect.getsourcelines(cls)
    except (OSError, TypeError):
        return {}
    cls_node = ast.parse(textwrap.dedent("".join(lines))).body[0]
    assert isinstance(cls_node, ast.ClassDef)
    docs: dict[str, str] = {}
    for name, lineno in _assigned(cls_node):
        got: list[str] = []
        i = lineno - 2
        while i >= 0 and lines[i].strip().startswith("#:"):
            got.insert(0, lines[i].strip()[2:].strip())
            i -= 1
        if got and not name.startswith("_"):
            docs.setdefault(name, " ".join(got))
    return docs


def hook_members(cls: type, names: tuple[str, ...] | None) -> list[tuple[str, str, str, str]]:
    """``(name, signature or kind, docstring, base)`` of the members the reference shows:
    ``names``, or every public one ``cls`` defines (see :data:`MEMBERS`). ``base``: the base
    class whose hook of that name the method implements (documented there), or ""."""
    attrs = attribute_docs(cls)
    own = vars(cls)
    if names is None:
        picked = [n for n in own if not n.startswith("_") and n != "OPTIONAL_HOOKS"
                  and (callable(own[n]) or isinstance(own[n], (property, classmethod,
                                                               staticmethod)))]
        picked += [n for n in attrs if n not in picked and n != "OPTIONAL_HOOKS"]
        if "OPTIONAL_HOOKS" in own:
            picked.insert(0, "OPTIONAL_HOOKS")
    else:
        picked = list(names)
    out = []
    for name in picked:
        if name == "OPTIONAL_HOOKS":
            hooks = ", ".join(f"`{h}`" for h in sorted(getattr(cls, name)))
            text = attrs.get(name, "The optional hooks gsp looks for with `overrides`.")
            out.append((name, "", f"{text} Here: {hooks}.", ""))
            continue
        value = inspect.getattr_static(cls, name, None)
        if isinstance(value, (classmethod, staticmethod)):
            value = value.__func__
        if isinstance(value, property):
            ret = inspect.signature(value.fget).return_annotation if value.fget else None
            sig = f": {_annotation(ret)}" if ret not in (None, inspect.Signature.empty) else ""
            doc = inspect.getdoc(value) or ""
            out.append((name, "property" + sig, doc, ""))
        elif callable(value) and not isinstance(value, type):
            doc = inspect.cleandoc(value.__doc__) if value.__doc__ else ""
            base = implemented(cls, name)
            out.append((name, _signature(value), doc, base.__name__ if base else ""))
        else:
            out.append((name, "attribute", attrs.get(name, ""), ""))
    return out


def implemented(cls: type, name: str) -> type | None:
    """The nearest base of ``cls`` (object aside) that documents the method ``name``: the hook a
    method of ``cls`` of that name implements; None if none does."""
    for base in cls.__mro__[1:-1]:
        fn = vars(base).get(name)
        if fn is not None and getattr(fn, "__doc__", None):
            return base
    return None


def _items(module: str, names: tuple[str, ...]) -> list[tuple[str, str]]:
    """``(module, name)`` of ``names``, each ``"sub.*"`` replaced by the functions it stands for."""
    out = []
    for name in names:
        if not name.endswith(".*"):
            out.append((module, name))
            continue
        sub = f"{module}.{name[:-2]}"
        mod = importlib.import_module(sub)
        out += [(sub, n) for n in mod.__all__ if inspect.isfunction(getattr(mod, n))]
    return out


def reference_entries() -> list[tuple[str, str, list[tuple[str, str, str, str]]]]:
    """``(qualified name, its docstring, its members)`` of everything in :data:`REFERENCE`."""
    entries = []
    for _, package, names in REFERENCE:
        for module, name in _items(package, names):
            obj = getattr(importlib.import_module(module), name)
            doc = inspect.cleandoc(obj.__doc__ or "")
            shown = hook_members(obj, MEMBERS.get(name)) if isinstance(obj, type) else []
            entries.append((f"{module}.{name}", doc, shown))
    return entries


def reference_markdown() -> str:
    """docs/plugin-reference.md: every hook a plugin implements or calls, from the docstrings."""
    out = [
        "# Plugin hook reference",
        "",
        f"<!-- Generated from the SDK's docstrings by `{REFERENCE_COMMAND}`; do not edit by",
        "hand (tests/project/test_plugin_reference.py fails when this file is stale). -->",
        "",
        "Every method a plugin overrides or calls on gsp's plugin SDK, with its contract and what",
        "it may raise, as the docstrings in the source say it. The guide is",
        "[plugins.md](plugins.md); the conformance kit is [testing.md](testing.md). *Optional*",
        "hooks have a default that is always correct; a class's `OPTIONAL_HOOKS` lists the fast",
        "paths gsp uses only where a plugin overrides them (`gsp.protocol.overrides`).",
        "",
    ]
    by_name = {e[0]: e for e in reference_entries()}
    for title, package, names in REFERENCE:
        out += [f"## {title}", ""]
        for module, name in _items(package, names):
            qual, doc, members = by_name[f"{module}.{name}"]
            obj = getattr(importlib.import_module(module), name)
            if isinstance(obj, type):
                bases = [b.__name__ for b in obj.__bases__
                         if b.__module__ not in ("builtins", "typing", "abc")]
                init = vars(obj).get("__init__") if not getattr(obj, "_is_protocol", False) \
                    else None
                sig = _signature(init).removesuffix(" -> None") if init else ""
                head = f"### class `{name}{sig}`" + (f" ({', '.join(bases)})" if bases else "")
            else:
                head = f"### `{name}{_signature(obj)}`"
            out += [head, "", f"`{qual}`", ""]
            if doc:
                out += [_md(doc), ""]
            for mname, sig, mdoc, base in members:
                if sig == "":
                    out += [f"- **`{mname}`** — {_md(mdoc)}"]
                    continue
                label = f"`{mname}{sig}`" if sig.startswith("(") else f"`{mname}` ({sig})"
                text = "\n".join(f"  {x}" if x else "" for x in _md(mdoc).splitlines()).strip()
                if base:
                    text = f"*Implements `{base}.{mname}`*" + (f": {text}" if text else ".")
                text = text or "*(undocumented)*"
                out += [f"- **{label}** — {text}"]
            if members:
                out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


# -- the layers and module map of docs/architecture.md ---------------------------------------------

#: The command that rewrites the generated blocks of docs/architecture.md.
ARCHITECTURE_COMMAND = "python scripts/docgen.py architecture -o docs/architecture.md"
ROOT = Path(__file__).resolve().parent.parent
ARCHITECTURE = ROOT / "docs" / "architecture.md"
#: Where a root package of the contracts other than gsp lives, under the repository root.
PACKAGE_DIRS = ("plugins/*", "plugins/*/src", "examples/plugins/*")
_BLOCK = re.compile(r"(<!-- begin generated: (\w+)[^\n]*-->\n).*?(<!-- end generated: \2 -->)",
                    re.S)


def contracts(pyproject: Path = ROOT / "pyproject.toml") -> dict[str, Any]:
    """The ``[tool.importlinter]`` table of ``pyproject``."""
    table: dict[str, Any] = tomllib.loads(pyproject.read_text(encoding="utf-8"))["tool"][
        "importlinter"]
    return table


def module_file(name: str) -> Path:
    """The source of module ``name`` in the repository (a package's ``__init__.py``); a name no
    file answers raises LookupError, so a contract naming a renamed module fails the page."""
    top, *rest = name.split(".")
    bases = [ROOT] if top == "gsp" else [d for g in PACKAGE_DIRS for d in sorted(ROOT.glob(g))]
    for base in bases:
        path = base.joinpath(top, *rest)
        if (path / "__init__.py").is_file():
            return path / "__init__.py"
        if path.with_suffix(".py").is_file():
            return path.with_suffix(".py")
    raise LookupError(f"the import contracts name {name}, which no file in the repository is")


def submodules(name: str) -> list[str]:
    """``name`` and, for a package, every module in it, depth first, by name."""
    path = module_file(name)
    out = [name]
    if path.name == "__init__.py":
        for child in sorted(path.parent.iterdir()):
            stem = child.stem if child.suffix == ".py" else child.name
            if child.name == "__init__.py" or not stem.isidentifier():
                continue
            if child.suffix == ".py" or (child / "__init__.py").is_file():
                out += submodules(f"{name}.{stem}")
    return out


def summary(name: str) -> str:
    """The first sentence of module ``name``'s docstring, as Markdown for one table cell."""
    path = module_file(name)
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
    if not doc:
        raise LookupError(f"{path.relative_to(ROOT)} has no docstring to say what it is for")
    para = " ".join(doc.split("\n\n")[0].split())
    m = re.search(r"(?<!e\.g)(?<!i\.e)\.(\s|$)", para)
    first = para[:m.start() + 1] if m else para
    if first.count("(") > first.count(")"):
        first += ")"
    return _cell(_ROLE.sub(r"`\1`", first).replace("``", "`"))


def _layers(table: dict[str, Any]) -> list[list[str]]:
    [layers] = [c for c in table["contracts"] if c["type"] == "layers"]
    return [[m.strip() for m in layer.split("|")] for layer in layers["layers"]]


def layers_markdown(table: dict[str, Any]) -> list[str]:
    """The layers as a Mermaid diagram, top to bottom, and the other contracts as rules."""
    layers = _layers(table)
    out = ["```mermaid", "flowchart TB"]
    for i, layer in enumerate(layers):
        for name in layer:
            module_file(name)
        out.append(f'  L{i}["{"<br>".join(layer)}"]')
    out += [f"  L{i} --> L{i + 1}" for i in range(len(layers) - 1)]
    out += ["```", "", "A layer imports only the layers below it (an arrow points down to what may "
            "be imported). Across the layers:", ""]
    for c in table["contracts"]:
        if c["type"] != "forbidden":
            continue
        for name in [*c["source_modules"], *c["forbidden_modules"]]:
            module_file(name)
        src = ", ".join(f"`{m}`" for m in c["source_modules"])
        bad = ", ".join(f"`{m}`" for m in c["forbidden_modules"])
        out.append(f"- **{c['name']}**: {src} never import {bad}.")
    return out


def modules_markdown(table: dict[str, Any]) -> list[str]:
    """Every module of gsp/ by layer, top first, with its docstring's first sentence; then what
    no layer names, then the plugin packages."""
    out = _table(["layer", "module", "what it is"], [])
    named: set[str] = set()
    for i, layer in enumerate(_layers(table), 1):
        for top in layer:
            for name in submodules(top):
                named.add(name)
                out.append(f"| {i} | `{name}` | {summary(name)} |")
    rest = [n for n in submodules("gsp") if n not in named and
            not any(n.startswith(f"{m}.") for m in named)]
    out += [f"| above | `{name}` | {summary(name)} |" for name in rest]
    out += ["", "The plugin distributions, each only a user of the public modules above:", ""]
    out += _table(["package", "where", "what it is"], (
        [f"`{p}`", f"`{module_file(p).parent.relative_to(ROOT)}/`", summary(p)]
        for p in table["root_packages"] if p != "gsp"))
    return out


def architecture_markdown(page: str | None = None) -> str:
    """docs/architecture.md with its generated blocks written afresh from the contracts: each
    ``<!-- begin generated: NAME -->`` ... ``<!-- end generated: NAME -->`` (NAME ``layers`` or
    ``modules``)."""
    text = ARCHITECTURE.read_text(encoding="utf-8") if page is None else page
    table = contracts()
    makers = {"layers": layers_markdown, "modules": modules_markdown}
    found: list[str] = []

    def fill(m: re.Match[str]) -> str:
        found.append(m.group(2))
        body = "\n".join(makers[m.group(2)](table))
        return f"{m.group(1)}{body}\n{m.group(3)}"

    out = _BLOCK.sub(fill, text)
    if sorted(found) != sorted(makers):
        raise LookupError(f"docs/architecture.md has the generated blocks {found}, "
                          f"not one each of {sorted(makers)}")
    return out


def main(argv: list[str] | None = None) -> int:
    """``python scripts/docgen.py options|hooks|architecture [-o FILE]``: write a reference
    (default: stdout)."""
    ap = argparse.ArgumentParser(prog="python scripts/docgen.py",
                                 description="gsp's generated references, in Markdown")
    sub = ap.add_subparsers(dest="cmd", required=True)
    opts = sub.add_parser("options", help="the options reference (docs/options.md)")
    opts.add_argument("--all", action="store_true",
                      help="include every installed plugin, not only gsp's own and shipped ones")
    hooks = sub.add_parser("hooks", help="the plugin hook reference (docs/plugin-reference.md)")
    arch = sub.add_parser("architecture", help="docs/architecture.md with its layers and module "
                          "map generated afresh from the import contracts")
    for p in (opts, hooks, arch):
        p.add_argument("-o", "--output", metavar="FILE", help="write it to FILE")
    a = ap.parse_args(argv)
    text = options_markdown(include_all=a.all) if a.cmd == "options" else \
        architecture_markdown() if a.cmd == "architecture" else reference_markdown()
    if a.output:
        with open(a.output, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
