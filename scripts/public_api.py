"""The public surface of gsp and its shipped plugins, one line per name:
``tests/project/public_api.txt``, which tests/project/test_public_api.py checks fresh (a change to
the surface is then a deliberate diff of that file).

Regenerate it with ``python scripts/public_api.py -o tests/project/public_api.txt`` at the
repository root.

The listing is read from the source by griffe (the library mkdocstrings renders the reference
pages with), statically: nothing is imported, so a mypyc-compiled build, an install without
pyspark and one with it all give the same listing, and a signature is the one written in the code.

What is listed: every public module (no part of its dotted name starts with ``_``) of the
packages in :data:`PACKAGES`, the homes of docs/api-guide.md (:data:`HOMES`) first, and in each
the names it exports (its ``__all__``, else the names it defines without a leading ``_``). A
class lists its constructor's parameters (a class that only gsp makes says so instead:
:data:`NO_PUBLIC_CONSTRUCTOR`), its bases, its public methods, properties and
attributes, inherited ones included, and the behaviour its special methods give (``with``,
``for``, ``len``, a call: :data:`SPECIAL`); a method is shown without ``self``; a value is shown
when it is short. A name that an earlier module already listed is one ``alias`` line to that
first spelling; a renamed name that still works with a ``DeprecationWarning`` (the literal
table of its module's ``__getattr__``, docs/api-guide.md "Renamed names") is one ``deprecated``
line to its new spelling; a name of ``__all__`` that only a module's ``__getattr__`` gives is a
``name`` line. The lines look like::

    module gsp
    class gsp.Chan(capacity: object = 0) bases Generic[T]
    method gsp.Chan.send(item: T, timeout: float | timedelta | None = None) -> None
    property gsp.Socket.closed: bool
    attribute gsp.POLLIN = 1
    function gsp.select(cases: Sequence[Recv | Send], timeout: float | None = None) -> ...
    alias gsp.chan.Chan = gsp.Chan
    deprecated gsp.admit.Refusal = gsp.admit.Denial
    name pyspark_gsp.DefaultSource (from the module's __getattr__)

:meth:`Surface.internals` names, for each listed name, the internals its signature shows (a
private name in an annotation, a base or a default, or a default a user cannot import from a
home); tests/project/test_public_api.py allows only those it lists, until they are fixed.
``python scripts/public_api.py --internals`` prints them.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, Literal, Mapping

import griffe

ROOT = Path(__file__).resolve().parent.parent
#: The file the listing is kept in, and the command that writes it (quoted by its test).
LISTING = ROOT / "tests" / "project" / "public_api.txt"
COMMAND = "python scripts/public_api.py -o tests/project/public_api.txt"

#: The top-level packages listed, each with the directory its source is found in: gsp and the
#: library distributions shipped beside it (gsp-bench is a tool, its command the surface).
PACKAGES = {
    "gsp": ROOT,
    "gsp_ws": ROOT / "plugins" / "gsp-ws",
    "gsp_star": ROOT / "plugins" / "gsp-star",
    "gsp_spark": ROOT / "plugins" / "gsp-spark" / "src",
    "pyspark_gsp": ROOT / "plugins" / "gsp-spark" / "src",
}

#: Where docs/api-guide.md says a name is imported from ("Where a name lives"), listed first so
#: that a name re-exported elsewhere is an alias of its spelling here.
HOMES = ("gsp", "gsp.admit", "gsp_ws", "gsp_ws.wsgi", "gsp_spark", "gsp_star",
         "gsp.protocol", "gsp.transport", "gsp.testing")

#: Special methods listed on a class: the behaviour they give is part of its API (``__init__``
#: is the class line's signature).
SPECIAL = frozenset({
    "__enter__", "__exit__", "__aenter__", "__aexit__", "__iter__", "__next__", "__aiter__",
    "__anext__", "__len__", "__contains__", "__getitem__", "__setitem__", "__delitem__",
    "__call__", "__bool__", "__await__",
})

_IDENT = re.compile(r"[A-Za-z_][\w.]*")


def private(path: str) -> bool:
    """Whether a dotted name has a part starting with ``_`` (a dunder is not private)."""
    return any(p.startswith("_") and not (p.startswith("__") and p.endswith("__"))
               for p in path.split("."))


def _table(value: object) -> dict[str, str] | None:
    """A literal table of renamed names: old -> new (a name in the same module) or -> (module,
    name); None if ``value`` is not one."""
    if not isinstance(value, dict) or not value or not all(isinstance(k, str) for k in value):
        return None
    out = {}
    for old, new in value.items():
        if isinstance(new, str):
            out[old] = new
        elif isinstance(new, tuple) and len(new) == 2 and all(isinstance(x, str) for x in new):
            out[old] = ".".join(new)
        else:
            return None
    return out


def deprecated_names(module: griffe.Module) -> dict[str, str]:
    """A module's renamed names (old name -> the new one's dotted spelling): the literal table
    given to the function that makes its ``__getattr__`` (``__getattr__ = renamed(__name__,
    {"Old": "New"})``; ``{"old": ("module", "new")}`` for a name that moved to another module;
    a keyword argument as well: ``attach(__name__, renamed={...})``)."""
    for node in ast.parse(module.source).body:
        if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and any(
                "__getattr__" in [n.id for n in ast.walk(t) if isinstance(n, ast.Name)]
                for t in node.targets)):
            continue
        call = node.value
        for arg in [*call.args, *(k.value for k in call.keywords)]:
            try:
                table = _table(ast.literal_eval(arg))
            except (ValueError, TypeError):
                continue
            if table is not None:
                return {old: new if "." in new else f"{module.path}.{new}"
                        for old, new in table.items()}
    return {}


def exported(module: griffe.Module) -> list[str]:
    """The names a module exports, but its submodules (listed as modules of their own): its
    ``__all__`` (a name there may be one its ``__getattr__`` gives), else its public names."""
    if module.exports is not None:
        names = [n if isinstance(n, str) else n.name for n in module.exports]
    else:
        names = [n for n, m in module.members.items() if m.is_public]
    return sorted(n for n in names if n not in module.members or not _is_module(module.members[n]))


def _is_module(obj: griffe.Object | griffe.Alias) -> bool:
    try:
        return obj.is_module
    except griffe.AliasResolutionError:
        return False


def _final(obj: griffe.Object | griffe.Alias) -> griffe.Object | None:
    if not obj.is_alias:
        return obj  # type: ignore[return-value]
    try:
        return obj.final_target  # type: ignore[union-attr]
    except (griffe.AliasResolutionError, griffe.CyclicAliasError):
        return None


def _text(value: str | griffe.Expr | None) -> str:
    return "" if value is None else str(value)


def _shown(parameters: griffe.Parameters, method: bool) -> list[griffe.Parameter]:
    """The parameters a caller passes: a method's without its first (``self``, ``cls``)."""
    items = list(parameters)
    if method and items and items[0].kind in (griffe.ParameterKind.positional_or_keyword,
                                              griffe.ParameterKind.positional_only):
        return items[1:]
    return items


def params(items: list[griffe.Parameter]) -> str:
    """A parameter list as written: ``(a: int, /, b: str = 'x', *, c: bool = False, **kw: Any)``."""
    out: list[str] = []
    seen_slash = seen_star = False
    for p in items:
        kind = p.kind
        if kind is not griffe.ParameterKind.positional_only and not seen_slash and any(
                q.kind is griffe.ParameterKind.positional_only for q in items):
            out.append("/")
            seen_slash = True
        if kind is griffe.ParameterKind.keyword_only and not seen_star:
            out.append("*")
            seen_star = True
        prefix = "*" if kind is griffe.ParameterKind.var_positional else \
            "**" if kind is griffe.ParameterKind.var_keyword else ""
        seen_star = seen_star or kind is griffe.ParameterKind.var_positional
        text = prefix + p.name
        if p.annotation is not None:
            text += f": {_text(p.annotation)}"
        if p.default is not None and prefix == "":
            text += f" = {_text(p.default)}" if p.annotation is not None else f"={_text(p.default)}"
        out.append(text)
    if not seen_slash and items and all(
            q.kind is griffe.ParameterKind.positional_only for q in items):
        out.append("/")
    return "(" + ", ".join(out) + ")"


def _value(attr: griffe.Attribute) -> str:
    if "instance-attribute" in attr.labels and "class-attribute" not in attr.labels:
        return ""
    value = _text(attr.value)
    return f" = {value}" if value and len(value) <= 60 and "\n" not in value else ""


def _deprecated(obj: griffe.Object) -> str:
    decorators = getattr(obj, "decorators", ())
    return " [deprecated]" if any(
        _text(d.value).split("(")[0].endswith("deprecated") for d in decorators) else ""


#: What a signature's expression is: an annotation (or a base), or a default.
Role = Literal["annotation", "default"]


@dataclass
class Entry:
    """One line of the listing, with the object it lists and its signature's expressions (for
    :func:`internals`)."""

    kind: str
    name: str
    text: str
    obj: griffe.Object | None = None
    exprs: list[tuple[Role, str | griffe.Expr]] = field(default_factory=list)
    module: str = ""

    def line(self) -> str:
        return f"{self.kind} {self.name}{self.text}"


def _exprs(parameters: list[griffe.Parameter]) -> list[tuple[Role, str | griffe.Expr]]:
    out: list[tuple[Role, str | griffe.Expr]] = []
    for p in parameters:
        out += [("annotation", p.annotation)] if p.annotation is not None else []
        out += [("default", p.default)] if p.default is not None else []
    return out


def function_entry(kind: str, name: str, fn: griffe.Function, method: bool) -> Entry:
    returns: list[tuple[Role, str | griffe.Expr]] = \
        [("annotation", fn.returns)] if fn.returns is not None else []
    if "property" in fn.labels:
        return Entry("property", name, f": {_text(fn.returns)}" if fn.returns else "", fn, returns)
    labels: list[str] = [lab for lab in ("classmethod", "staticmethod") if lab in fn.labels]
    kind = " ".join([*(["async"] if "async" in fn.labels else []), *(labels[:1] or [kind])])
    shown = _shown(fn.parameters, method and "staticmethod" not in fn.labels)
    arrow = f" -> {_text(fn.returns)}" if fn.returns is not None else ""
    return Entry(kind, name, params(shown) + arrow + _deprecated(fn), fn,
                 _exprs(shown) + returns)


def attribute_entry(name: str, attr: griffe.Attribute) -> Entry:
    ann = f": {_text(attr.annotation)}" if attr.annotation is not None else ""
    kind = "property" if "property" in attr.labels else "attribute"
    exprs: list[tuple[Role, str | griffe.Expr]] = \
        [("annotation", attr.annotation)] if attr.annotation is not None else []
    return Entry(kind, name, ann + _value(attr), attr, exprs)


#: The class attribute by which a class that only gsp makes says so (docs/api-guide.md,
#: "Classes gsp makes"): its constructor is not listed.
NO_PUBLIC_CONSTRUCTOR = "_no_public_constructor"


def public_constructor(cls: griffe.Class) -> bool:
    """Whether a user constructs ``cls``: not if it (or a base) sets
    :data:`NO_PUBLIC_CONSTRUCTOR` to True."""
    marker = cls.all_members.get(NO_PUBLIC_CONSTRUCTOR)
    target = _final(marker) if marker is not None else None
    return not (isinstance(target, griffe.Attribute) and _text(target.value) == "True")


def class_entries(name: str, cls: griffe.Class) -> list[Entry]:
    init = cls.all_members.get("__init__")
    init_fn = _final(init) if init is not None else None
    made = not public_constructor(cls)
    shown = _shown(init_fn.parameters, True) \
        if isinstance(init_fn, griffe.Function) and not made else None
    signature = " (no public constructor)" if made else "" if shown is None else params(shown)
    bases = ", ".join(_text(b) for b in cls.bases)
    exprs: list[tuple[Role, str | griffe.Expr]] = [("annotation", b) for b in cls.bases]
    out = [Entry("class", name, signature + (f" bases {bases}" if bases else "")
                 + _deprecated(cls), cls, exprs + _exprs(shown or []))]
    for member_name in sorted(cls.all_members):
        if member_name.startswith("_") and member_name not in SPECIAL:
            continue
        member = _final(cls.all_members[member_name])
        if member is None:
            continue
        out += object_entries(f"{name}.{member_name}", member, in_class=True)
    return out


def object_entries(name: str, obj: griffe.Object, in_class: bool = False) -> list[Entry]:
    if isinstance(obj, griffe.Class):
        return class_entries(name, obj)
    if isinstance(obj, griffe.Function):
        return [function_entry("method" if in_class else "function", name, obj, in_class)]
    if isinstance(obj, griffe.Attribute):
        return [attribute_entry(name, obj)]
    if isinstance(obj, griffe.TypeAlias):
        value: list[tuple[Role, str | griffe.Expr]] = \
            [("annotation", obj.value)] if obj.value is not None else []
        return [Entry("type", name, f" = {_text(obj.value)}", obj, value)]
    return [Entry(obj.kind.value, name, "", obj)]


def _names(role: Role, expr: str | griffe.Expr, scope: griffe.Object
           ) -> Iterator[tuple[str, str]]:
    """(the name as written, its canonical path) of each name an expression uses; a quoted
    annotation's names are resolved in ``scope``."""
    items: Iterable[str | griffe.Expr] = expr.iterate(flat=True) if isinstance(
        expr, griffe.Expr) else [expr]
    for item in items:
        if isinstance(item, griffe.ExprName):
            yield item.name, item.canonical_path
        elif isinstance(item, str) and item[:1] in "'\"" and role == "annotation":
            for word in _IDENT.findall(item.strip("'\"")):
                head, _, rest = word.partition(".")
                try:
                    path = scope.resolve(head)
                except griffe.NameResolutionError:
                    path = head
                yield word, f"{path}.{rest}" if rest else path


class Surface:
    """The public surface of some ``packages`` (name -> the directory its source is found in),
    read from source, with ``homes``: the modules a user imports from, listed first."""

    def __init__(self, packages: Mapping[str, Path] = PACKAGES,
                 homes: tuple[str, ...] = HOMES) -> None:
        self.packages = dict(packages)
        self.homes = homes
        loader = griffe.GriffeLoader(search_paths=sorted({str(p) for p in packages.values()}),
                                     allow_inspection=False)
        for package in packages:
            loader.load(package, try_relative_path=False)
        loader.resolve_aliases(external=False, implicit=False)
        self.modules = loader.modules_collection

    def public_modules(self) -> list[griffe.Module]:
        """Every public module of the packages, the homes first, then by name."""
        found: dict[str, griffe.Module] = {}

        def walk(module: griffe.Module) -> None:
            if private(module.path) or module.path.endswith(".__main__"):
                return
            found[module.path] = module
            for sub in module.modules.values():
                if not sub.is_alias:
                    walk(sub)

        for package in self.packages:
            walk(self.modules[package])
        order = {name: i for i, name in enumerate(self.homes)}
        return sorted(found.values(), key=lambda m: (order.get(m.path, len(order)), m.path))

    def entries(self) -> Iterator[Entry]:
        """The listing's entries, module by module (an alias's ``obj`` is the object it
        names)."""
        first: dict[str, str] = {}  # an object's canonical path -> its first public spelling
        for module in self.public_modules():
            at = module.path
            yield Entry("module", at, "", module, module=at)
            renamed = deprecated_names(module)
            for old in sorted(renamed):
                yield Entry("deprecated", f"{at}.{old}", f" = {renamed[old]}", module=at)
            for name in exported(module):
                dotted = f"{at}.{name}"
                member = module.members.get(name)
                if member is None:  # in __all__, given by the module's __getattr__
                    yield Entry("name", dotted, " (from the module's __getattr__)", module=at)
                    continue
                target = _final(member)
                if target is None:
                    where = member.target_path if isinstance(member, griffe.Alias) \
                        else member.path
                    yield Entry("alias", dotted, f" = {where}", module=at)
                elif target.path in first:
                    yield Entry("alias", dotted, f" = {first[target.path]}", target, module=at)
                else:
                    first[target.path] = dotted
                    for e in object_entries(dotted, target):
                        e.module = at
                        yield e

    def listing(self) -> str:
        """The text of ``tests/project/public_api.txt``."""
        head = [f"# The public surface of gsp and its shipped plugins, generated by `{COMMAND}`",
                "# (scripts/public_api.py says what each line is). Do not edit: regenerate.", ""]
        return "\n".join([*head, *(e.line() for e in self.entries())]) + "\n"

    def home(self, module: str) -> bool:
        """Whether a user imports from ``module`` (docs/api-guide.md, "Where a name lives"): a
        home, or a module inside a home that is a subpackage (an SDK: ``gsp.transport.wire``;
        a top-level package is the home of its own names only: ``gsp.options`` is not one)."""
        return module in self.homes or any(
            module.startswith(f"{h}.") for h in self.homes if "." in h)

    def internals(self) -> dict[str, list[tuple[str, str]]]:
        """Listed name -> the internals its signature shows, each as (the name as written, the
        dotted name of what it names): a name starting with ``_``, or naming an object of a
        private module that no public module exports (in an annotation, a base or a default);
        or a default that names a constant a user cannot import from a home
        (``timeout=FROM_OPTION``), where a literal would say what it is."""
        listed = list(self.entries())
        public = {e.obj.path for e in listed if e.obj is not None}
        at_home = {e.obj.path for e in listed if e.obj is not None and self.home(e.module)}
        out: dict[str, list[tuple[str, str]]] = {}
        for e in listed:
            if e.obj is None or e.kind == "alias":
                continue
            scope = e.obj if isinstance(e.obj, (griffe.Class, griffe.Module)) else e.obj.parent
            bad: list[tuple[str, str]] = []
            for role, expr in e.exprs:
                for written, path in _names(role, expr, scope or e.obj):
                    try:
                        target = _final(self.modules.get_member(path))
                    except (KeyError, ValueError):
                        target = None
                    where = target.path if target is not None else path
                    constant = where.split(".")[0] in self.packages and not (
                        target is not None and target.is_module)
                    if (private(written) or (private(where) and where not in public) or
                            (role == "default" and constant and where not in at_home)) and \
                            (written, where) not in bad:
                        bad.append((written, where))
            if bad:
                out[e.name] = bad
        return out


def main(argv: list[str] | None = None) -> int:
    """``python scripts/public_api.py [-o FILE] [--internals]``."""
    ap = argparse.ArgumentParser(prog="python scripts/public_api.py",
                                 description="the public surface of gsp and its shipped plugins")
    ap.add_argument("-o", "--output", metavar="FILE", help="write the listing to FILE")
    ap.add_argument("--internals", action="store_true",
                    help="print instead the listed names whose signatures show private names")
    a = ap.parse_args(argv)
    surface = Surface()
    if a.internals:
        text = "".join(f"{name}: {', '.join(w if w == p else f'{w} ({p})' for w, p in bad)}\n"
                       for name, bad in surface.internals().items())
    else:
        text = surface.listing()
    if a.output:
        Path(a.output).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
