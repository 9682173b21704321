"""Pipe admission rules: who may become a pipe of a socket (the ``admit`` option).

A rule says whether a peer is admitted, from the facts its transport gives (``pipe.peer``,
:class:`gsp.transport.Peer`): its IP address, its process's uid/gid/pid, its TLS certificate,
the WebSocket upgrade request it sent. Rules combine with ``&`` (both), ``|`` (either) and ``~``
(not); a plain callable ``peer -> bool`` is a rule too::

    from gsp import admit

    office = admit.cidr("10.1.0.0/16", "fd00:1::/48")
    rep = gsp.socket("rep", admit=(office | admit.certificate(san="ops.example.com"))
                     & ~admit.cidr("10.1.99.0/24") & admit.per_address(8))
    rep.listen("tcp://0.0.0.0:5555", admit=admit.cidr("127.0.0.0/8"))  # this listener's own

A listener judges a connection as soon as the facts its rule needs are known: right after
accept for an address, a process's credentials, a ``wss://`` certificate or a ws request (no
greenlet, no buffer, nothing sent: a flood from a refused address costs an accept and a close);
after the SP handshake (TLS over tcp: the certificate comes with it) and before the pipe
attaches otherwise. A refused connection is closed before any message is delivered, counted in
``stats()`` (``pipes_refused_<reason>``, :data:`REASONS`) and logged. A dialer judges the server
the same way: a refused server is closed and the dialer redials after its backoff.

Each leaf rule is judged on what it knows: a fact the peer's transport does not give (an IP on
``ipc://``, a certificate on plain tcp) does not match. :func:`judge` is what gsp's core calls.
"""

from __future__ import annotations

import hmac
import ipaddress
import warnings
from typing import TYPE_CHECKING, Any, Callable, Iterable, Union

from ._lazy import moved
from .errors import BadOption

if TYPE_CHECKING:
    from .transport.peer import Peer, WSRequest

__all__ = [
    "Rule", "Denial", "REASONS", "cidr", "uid", "gid", "pid", "certificate", "ws_header",
    "ws_cookie", "ws_origin", "ws_query", "ws_path", "ws_request", "per_address", "when",
    "as_rule", "judge", "check_option", "source", "source_of",
]

#: Why a connection was refused, as ``stats()`` counts it (``pipes_refused_<reason>``):
#: ``full`` (the socket or listener was at ``max_pipes``), ``address`` (:func:`cidr`),
#: ``per_address`` (:func:`per_address`), ``credentials`` (:func:`uid`, :func:`gid`,
#: :func:`pid`), ``certificate`` (:func:`certificate`), ``ws_request`` (the ``ws_*`` rules),
#: ``callable`` (a plain callable, :func:`when`).
REASONS = ("full", "address", "per_address", "credentials", "certificate", "ws_request",
           "callable")

#: A verdict: True (admit), False (refuse), None (not known yet: a fact the rule needs comes
#: later, e.g. a certificate after the TLS handshake).
Verdict = Union[bool, None]

PeerCheck = Callable[["Peer"], object]


class Judging:
    """What a rule may ask of the socket besides the peer's facts: ``final`` (whether every
    fact is in: a fact still missing is missing for good) and ``pipes_from(source)``, the pipes
    of the socket whose peer has that source address (:attr:`Peer.ip` as a string, or the whole
    address where there is no IP)."""

    __slots__ = ("final", "pipes_from")

    def __init__(self, final: bool, pipes_from: Callable[[str], int]) -> None:
        self.final = final
        self.pipes_from = pipes_from


class _Failed(Exception):
    """A leaf's check raised: carries the leaf and the error up to :func:`judge`."""

    def __init__(self, leaf: "Rule", error: Exception) -> None:
        super().__init__(leaf, error)
        self.leaf = leaf
        self.error = error


def _ask(leaf: "Rule", check: Callable[[Any], object], arg: Any) -> bool:
    """``check(arg)``, the user's code of ``leaf``, as a verdict; a check that raises refuses
    (:func:`judge` logs the error with the leaf)."""
    try:
        return bool(check(arg))
    except Exception as exc:
        raise _Failed(leaf, exc) from exc


class Rule:
    """An admission rule. Combine with ``&``, ``|``, ``~``; call it with a :class:`Peer` for its
    verdict once every fact is in (``rule(peer)``: True or False)."""

    __slots__ = ()
    #: Which :data:`REASONS` entry a refusal by this rule counts under.
    reason = "callable"

    def decide(self, peer: "Peer", ctx: Judging) -> tuple[Verdict, "Rule"]:
        """The verdict on ``peer`` and the leaf rule that gave it (for the log and the count)."""
        return self.verdict(peer, ctx), self

    def verdict(self, peer: "Peer", ctx: Judging) -> Verdict:  # pragma: no cover (abstract)
        raise NotImplementedError

    def __call__(self, peer: "Peer") -> bool:
        verdict, _ = self.decide(peer, Judging(True, lambda source: 0))
        return bool(verdict)

    def __and__(self, other: "Rule | PeerCheck") -> "Rule":
        return _All(self, as_rule(other, "&"))

    def __rand__(self, other: "Rule | PeerCheck") -> "Rule":
        return _All(as_rule(other, "&"), self)

    def __or__(self, other: "Rule | PeerCheck") -> "Rule":
        return _Any(self, as_rule(other, "|"))

    def __ror__(self, other: "Rule | PeerCheck") -> "Rule":
        return _Any(as_rule(other, "|"), self)

    def __invert__(self) -> "Rule":
        return _Not(self)

    def __bool__(self) -> bool:
        # ``a and b`` would be ``b`` alone, silently: a rule has no truth value.
        raise TypeError("a gsp.admit rule has no truth value: combine rules with &, | and ~ "
                        "(not and, or, not); call rule(peer) for a verdict")


class _Many(Rule):
    """Rules joined by one operator (``&`` or ``|``), flattened: ``a & b & c`` is one of three."""

    __slots__ = ("rules",)
    joiner = ""

    def __init__(self, a: Rule, b: Rule) -> None:
        kind = type(self)
        self.rules: tuple[Rule, ...] = (*(a.rules if isinstance(a, kind) else (a,)),
                                        *(b.rules if isinstance(b, kind) else (b,)))

    @property
    def reason(self) -> str:  # type: ignore[override]
        return str(self.rules[0].reason)

    def __repr__(self) -> str:
        kind = type(self)
        return self.joiner.join(
            f"({r!r})" if isinstance(r, _Many) and not isinstance(r, kind) else repr(r)
            for r in self.rules)


class _All(_Many):
    __slots__ = ()
    joiner = " & "

    def decide(self, peer: "Peer", ctx: Judging) -> tuple[Verdict, Rule]:
        out: Verdict = True
        for rule in self.rules:
            verdict, leaf = rule.decide(peer, ctx)
            if verdict is False:
                return False, leaf  # the first that refuses decides; the rest are not asked
            if verdict is None:
                out = None
        return out, self


class _Any(_Many):
    __slots__ = ()
    joiner = " | "

    def decide(self, peer: "Peer", ctx: Judging) -> tuple[Verdict, Rule]:
        out: Verdict = False
        by: Rule = self
        for rule in self.rules:
            verdict, leaf = rule.decide(peer, ctx)
            if verdict is True:
                return True, leaf
            if verdict is None:
                out = None
            else:
                by = leaf  # every one refused: the last one asked has the last word
        return out, by


class _Not(Rule):
    __slots__ = ("rule",)

    def __init__(self, rule: Rule) -> None:
        self.rule = rule

    def decide(self, peer: "Peer", ctx: Judging) -> tuple[Verdict, Rule]:
        verdict, _ = self.rule.decide(peer, ctx)
        return (None if verdict is None else not verdict), self

    @property
    def reason(self) -> str:  # type: ignore[override]
        return self.rule.reason

    def __repr__(self) -> str:
        return f"~({self.rule!r})" if isinstance(self.rule, _Many) else f"~{self.rule!r}"


# -- leaves ------------------------------------------------------------------------------------
def _values(name: str, values: tuple[Any, ...]) -> tuple[Any, ...]:
    if len(values) == 1 and isinstance(values[0], (list, tuple, set, frozenset)):
        values = tuple(values[0])
    if not values:
        raise BadOption(f"admit.{name}() needs at least one value")
    return values


class _Networks(Rule):
    reason = "address"
    __slots__ = ("nets",)

    def __init__(self, nets: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]) -> None:
        self.nets = nets

    def verdict(self, peer: "Peer", ctx: Judging) -> Verdict:
        ip = peer.ip
        if ip is None:
            return False
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped  # ::ffff:10.0.0.1 (a dual-stack listener) is 10.0.0.1
        return any(ip in net for net in self.nets)

    def __repr__(self) -> str:
        return f"cidr({', '.join(repr(str(n)) for n in self.nets)})"


def cidr(*networks: str | ipaddress.IPv4Network | ipaddress.IPv6Network
         | ipaddress.IPv4Address | ipaddress.IPv6Address) -> Rule:
    """The peer's IP address is in one of ``networks`` (``"10.0.0.0/8"``, ``"::1"``,
    ``"192.168.1.7"``: an address alone is a network of one); tcp, tls+tcp, ws, wss, udp. An
    IPv4-mapped IPv6 peer (``::ffff:10.0.0.1``) is judged as its IPv4 address. A peer without an
    IP (ipc, abstract, inproc) does not match. Deny with ``~admit.cidr(...)``."""
    nets = []
    for n in _values("cidr", networks):
        if not isinstance(n, (str, ipaddress.IPv4Network, ipaddress.IPv6Network,
                              ipaddress.IPv4Address, ipaddress.IPv6Address)):
            raise BadOption(f"admit.cidr() takes IP networks such as '10.0.0.0/8' or '::1', "
                            f"not {n!r}")
        try:
            nets.append(ipaddress.ip_network(n, strict=False))
        except (TypeError, ValueError) as exc:
            raise BadOption(f"admit.cidr() takes IP networks such as '10.0.0.0/8' or '::1', "
                            f"not {n!r}: {exc}") from None
    return _Networks(tuple(nets))


class _Credential(Rule):
    reason = "credentials"
    __slots__ = ("field", "ids")

    def __init__(self, field: str, ids: frozenset[int]) -> None:
        self.field = field
        self.ids = ids

    def verdict(self, peer: "Peer", ctx: Judging) -> Verdict:
        return getattr(peer, self.field) in self.ids

    def __repr__(self) -> str:
        return f"{self.field}({', '.join(map(str, sorted(self.ids)))})"


def _ids(field: str, ids: tuple[Any, ...]) -> Rule:
    out = set()
    for i in _values(field, ids):
        if not isinstance(i, int) or isinstance(i, bool) or i < 0:
            raise BadOption(f"admit.{field}() takes ints >= 0, not {i!r}")
        out.add(i)
    return _Credential(field, frozenset(out))


def uid(*uids: int) -> Rule:
    """The peer process's user id is one of ``uids`` (ipc, unix, abstract: SO_PEERCRED)."""
    return _ids("uid", uids)


def gid(*gids: int) -> Rule:
    """The peer process's (primary) group id is one of ``gids`` (ipc, unix, abstract)."""
    return _ids("gid", gids)


def pid(*pids: int) -> Rule:
    """The peer process's id is one of ``pids`` (ipc, unix, abstract)."""
    return _ids("pid", pids)


def _fingerprint(v: Any) -> str:
    if not isinstance(v, str):
        raise BadOption(f"admit.certificate(fingerprint=...) takes SHA-256 fingerprints in hex, "
                        f"not {v!r}")
    hexa = v.replace(":", "").strip().lower()
    if len(hexa) != 64 or any(c not in "0123456789abcdef" for c in hexa):
        raise BadOption(f"admit.certificate(fingerprint=...) takes a SHA-256 fingerprint: 64 hex "
                        f"digits (colons allowed), not {v!r}")
    return hexa


def _strings(name: str, v: Any) -> tuple[Any, ...]:
    """One item (a str, or a tuple of strs: a (kind, value) pair), or an iterable of several."""
    if isinstance(v, str) or (isinstance(v, tuple) and v and not isinstance(v[0], tuple)):
        return (v,)
    try:
        items = tuple(v)
    except TypeError:
        raise BadOption(f"admit.certificate({name}=...) takes a str or a list of them, "
                        f"not {v!r}") from None
    if not items:
        raise BadOption(f"admit.certificate({name}=...) is empty")
    return items


class _Certificate(Rule):
    reason = "certificate"
    __slots__ = ("subject", "issuer", "sans", "fingerprints")

    def __init__(self, subject: dict[str, str], issuer: dict[str, str],
                 sans: tuple[Any, ...], fingerprints: frozenset[str]) -> None:
        self.subject = subject
        self.issuer = issuer
        self.sans = sans
        self.fingerprints = fingerprints

    def verdict(self, peer: "Peer", ctx: Judging) -> Verdict:
        cert = peer.certificate
        if cert is None:
            return False if ctx.final else None
        if self.fingerprints and cert.fingerprint not in self.fingerprints:
            return False
        if any(cert.subject.get(k) != v for k, v in self.subject.items()):
            return False
        if any(cert.issuer.get(k) != v for k, v in self.issuer.items()):
            return False
        if self.sans:
            have = cert.sans
            for want in self.sans:
                if any((v == want if isinstance(want, str) else (k, v) == want)
                       for k, v in have):
                    return True
            return False
        return True

    def __repr__(self) -> str:
        parts = [f"{k}={v!r}" for k, v in (("subject", self.subject), ("issuer", self.issuer))
                 if v]
        if self.sans:
            parts.append(f"san={self.sans!r}")
        if self.fingerprints:
            parts.append(f"fingerprint={sorted(self.fingerprints)!r}")
        return f"certificate({', '.join(parts)})"


def _name(which: str, v: Any) -> dict[str, str]:
    if v is None:
        return {}
    if isinstance(v, str):
        return {"commonName": v}
    if isinstance(v, dict) and v and all(isinstance(k, str) and isinstance(x, str)
                                         for k, x in v.items()):
        return dict(v)
    raise BadOption(f"admit.certificate({which}=...) takes a common name (str) or a dict of "
                    f"name fields such as {{'commonName': 'x', 'organizationName': 'y'}}, "
                    f"not {v!r}")


def certificate(*, subject: str | dict[str, str] | None = None,
                issuer: str | dict[str, str] | None = None,
                san: str | tuple[str, str] | Iterable[str | tuple[str, str]] | None = None,
                fingerprint: str | Iterable[str] | None = None) -> Rule:
    """The peer's TLS certificate (tls+tcp, wss) matches every part given: ``subject`` and
    ``issuer`` (a common name, or a dict of name fields: ``{"commonName": "x",
    "organizationName": "y"}``, each equal), ``san`` (one subjectAltName, or a list of several
    of which one must be present: a value such as ``"localhost"`` of any kind, or a
    ``(kind, value)`` pair such as ``("IP Address", "10.0.0.7")``) and ``fingerprint`` (the
    SHA-256 of its DER, in hex, colons allowed; or a list of several, one of which). Subject,
    issuer and SANs are known only of a certificate that was verified (``tls_client_auth`` on
    a listener, ``tls_verify`` on a dialer); a fingerprint of any. A peer without a
    certificate does not match."""
    subj, iss = _name("subject", subject), _name("issuer", issuer)
    sans: tuple[Any, ...] = ()
    if san is not None:
        sans = _strings("san", san)
        for s in sans:
            if not (isinstance(s, str) or (isinstance(s, tuple) and len(s) == 2
                                           and all(isinstance(x, str) for x in s))):
                raise BadOption(f"admit.certificate(san=...) takes 'value' or ('kind', 'value'), "
                                f"not {s!r}")
    fps: frozenset[str] = frozenset()
    if fingerprint is not None:
        fps = frozenset(_fingerprint(f) for f in _strings(
            "fingerprint", [fingerprint] if isinstance(fingerprint, str) else fingerprint))
    if not (subj or iss or sans or fps):
        raise BadOption("admit.certificate() needs subject=, issuer=, san= or fingerprint=")
    return _Certificate(subj, iss, sans, fps)


# -- WebSocket requests ----------------------------------------------------------------------
class _WS(Rule):
    reason = "ws_request"
    __slots__ = ("test", "text")

    def __init__(self, test: Callable[["WSRequest"], object], text: str) -> None:
        self.test = test
        self.text = text

    def verdict(self, peer: "Peer", ctx: Judging) -> Verdict:
        req = peer.ws_request
        if req is None:
            return False if ctx.final else None
        return _ask(self, self.test, req)

    def __repr__(self) -> str:
        return self.text


def _text(what: str, v: Any, optional: bool = True) -> Any:
    if (v is None and optional) or isinstance(v, str):
        return v
    raise BadOption(f"{what} must be a str{' or None' if optional else ''}, not {v!r}")


def _same(a: str | None, b: str) -> bool:
    """Equal, in a time that does not tell how much of a secret matched."""
    return a is not None and hmac.compare_digest(a.encode("utf-8", "surrogateescape"),
                                                 b.encode("utf-8", "surrogateescape"))


def ws_header(name: str, value: str | None = None) -> Rule:
    """The upgrade request (ws, wss listeners) has header ``name`` (any case), with ``value``
    when given (one of its values equal to it, compared in constant time: a token)."""
    _text("admit.ws_header()'s name", name, False)
    _text("admit.ws_header()'s value", value)
    if value is None:
        return _WS(lambda r: r.header(name) is not None, f"ws_header({name!r})")
    return _WS(lambda r: any(_same(v, value) for v in r.header_values(name)),
               f"ws_header({name!r}, '...')")


def ws_cookie(name: str, value: str | None = None) -> Rule:
    """The upgrade request sent cookie ``name``, with ``value`` when given (constant-time
    compare). Browsers send cookies with a WebSocket upgrade, but no headers of the page's."""
    _text("admit.ws_cookie()'s name", name, False)
    _text("admit.ws_cookie()'s value", value)
    if value is None:
        return _WS(lambda r: name in r.cookies, f"ws_cookie({name!r})")
    return _WS(lambda r: _same(r.cookies.get(name), value), f"ws_cookie({name!r}, '...')")


def ws_query(name: str, value: str | None = None) -> Rule:
    """The upgrade request's target has query parameter ``name`` (``/sp?token=...``), with
    ``value`` when given (one of its values equal, constant-time compare)."""
    _text("admit.ws_query()'s name", name, False)
    _text("admit.ws_query()'s value", value)
    if value is None:
        return _WS(lambda r: name in r.query_params, f"ws_query({name!r})")
    return _WS(lambda r: any(_same(v, value) for v in r.query_params.get(name, ())),
               f"ws_query({name!r}, '...')")


def ws_origin(*origins: str) -> Rule:
    """Deprecated: which web pages may connect is gsp-ws's ``ws_origins`` listener option
    (403 before the upgrade; by default the endpoint's own origin only). As a rule: the
    upgrade request's ``Origin`` is one of ``origins`` (compared in lower case); a request
    without an Origin (not from a browser) does not match."""
    warnings.warn("admit.ws_origin() is the ws_origins listener option now (gsp-ws: "
                  "listen(url, ws_origins={...}) or mount(sock, app, path, ws_origins={...})); "
                  "admit.ws_origin goes in the next minor version", DeprecationWarning,
                  stacklevel=2)
    want = frozenset(_text("admit.ws_origin()'s origins", o, False).lower().rstrip("/")
                     for o in _values("ws_origin", origins))
    return _WS(lambda r: (r.header("origin") or "").lower().rstrip("/") in want,
               f"ws_origin({', '.join(map(repr, sorted(want)))})")


def ws_path(*paths: str) -> Rule:
    """The upgrade request's path (without the query) is one of ``paths``."""
    want = frozenset(_text("admit.ws_path()'s paths", p, False) for p in _values("ws_path", paths))
    return _WS(lambda r: r.path in want, f"ws_path({', '.join(map(repr, sorted(want)))})")


def ws_request(check: Callable[["WSRequest"], object]) -> Rule:
    """``check(request)`` is true of the upgrade request (a :class:`gsp.transport.WSRequest`:
    ``path``, ``target``, ``query_params``, ``headers``, ``cookies``, ...)."""
    if not callable(check):
        raise BadOption(f"admit.ws_request() takes a callable (WSRequest) -> bool, not {check!r}")
    return _WS(check, f"ws_request({_callable_name(check)})")


# -- counts, callables --------------------------------------------------------------------------
def source_of(address: str) -> str:
    """The source of a peer's address as :func:`per_address` (and a listener's
    ``max_handshakes_per_address``) counts it: its IP without scheme, brackets and port
    (``"tcp://[::1]:5000"`` gives ``"::1"``, ``"ws://10.0.0.7:80"`` ``"10.0.0.7"``; an
    IPv4-mapped IPv6 address its IPv4 one); a bare IP is itself; anything else (an ipc path,
    an abstract name) the whole address."""
    scheme, sep, rest = address.partition("://")
    if not sep:
        rest = address
    if rest.startswith("["):
        host = rest[1:].partition("]")[0]
    elif rest.count(":") == 1 and not rest.startswith("/"):
        host, _, port = rest.partition(":")
        if not port.isdigit():
            return address
    elif rest.count(":") > 1 or not sep:
        host = rest  # a bare IPv6 address, or a bare host
    else:
        return address
    if host[:7].lower() == "::ffff:" and "." in host:
        host = host[7:]
    return host


def source(peer: "Peer") -> str:
    """A peer's source as :func:`per_address` counts it (:func:`source_of` its address)."""
    return source_of(peer.address)


class _PerAddress(Rule):
    reason = "per_address"
    __slots__ = ("n",)

    def __init__(self, n: int) -> None:
        self.n = n

    def verdict(self, peer: "Peer", ctx: Judging) -> Verdict:
        if ctx.pipes_from(source(peer)) >= self.n:
            return False
        # Below the bound at accept: others from the address may attach during the handshake,
        # so the count is taken again just before the pipe attaches.
        return True if ctx.final else None

    def __repr__(self) -> str:
        return f"per_address({self.n})"


def per_address(n: int) -> Rule:
    """At most ``n`` pipes of the socket from one source address (an IP; on ipc, one path):
    a connection from an address that has ``n`` already is refused."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise BadOption(f"admit.per_address() takes an int >= 1, not {n!r}")
    return _PerAddress(n)


def _callable_name(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)


class _When(Rule):
    __slots__ = ("check", "early")

    def __init__(self, check: PeerCheck, early: bool = False) -> None:
        self.check = check
        self.early = early

    def verdict(self, peer: "Peer", ctx: Judging) -> Verdict:
        # Called once: when every fact is in (it may read any of them), or at accept (early).
        if not (ctx.final or self.early):
            return None
        return _ask(self, self.check, peer)

    def __repr__(self) -> str:
        return f"when({_callable_name(self.check)}{', early=True' if self.early else ''})"


def when(check: PeerCheck, *, early: bool = False) -> Rule:
    """A rule of a plain callable: ``check(peer)`` (a :class:`gsp.transport.Peer`) is true. It
    is called in gsp's greenlet (it must not block): once per connection after the SP
    handshake, when every fact is in (a tls+tcp certificate comes with the handshake); or, with
    ``early=True``, at accept or dial, before any handshake, with the facts known then (the
    address, ipc credentials, a ws request, a wss certificate), and again after the handshake
    when another part of the rule could not tell before. A plain callable given as a rule is
    ``when(callable)``. One that raises refuses the peer (and is logged)."""
    if not callable(check):
        raise BadOption(f"admit.when() takes a callable (peer) -> bool, not {check!r}")
    if not isinstance(early, bool):
        raise BadOption(f"admit.when()'s early must be True or False, not {early!r}")
    return _When(check, early)


def as_rule(v: Any, where: str = "admit") -> Rule:
    """``v`` as a :class:`Rule`: a rule is itself, a callable becomes :func:`when`."""
    if isinstance(v, Rule):
        return v
    if callable(v):
        return _When(v)
    raise BadOption(f"{where} takes a gsp.admit rule or a callable (peer) -> bool, not {v!r}")


def check_option(name: str, v: Any) -> Rule | None:
    """The ``admit`` option's validator: None, a rule, or a callable (made a rule)."""
    return None if v is None else as_rule(v, name)


# -- what the core calls -------------------------------------------------------------------------
class Denial:
    """Why a peer was denied: the ``rule`` (a leaf) whose verdict refused it, its ``reason``
    (one of :data:`REASONS`) and, for a rule that raised, the ``error``."""

    __slots__ = ("rule", "reason", "error")

    def __init__(self, rule: Rule, reason: str, error: BaseException | None = None) -> None:
        self.rule = rule
        self.reason = reason if reason in REASONS else "callable"
        self.error = error

    def __repr__(self) -> str:
        return f"<Denial {self.reason}: {self.rule!r}>"


def judge(rule: Rule, peer: "Peer", final: bool,
          pipes_from: Callable[[str], int]) -> tuple[Verdict, Denial | None]:
    """The core's one call: ``rule``'s verdict on ``peer``, and the :class:`Denial` when it is
    False. ``final``: every fact is in (else a verdict of None says: ask again once they are;
    when final, None does not happen). ``pipes_from(source)``: see :class:`Judging`. A rule
    that raises refuses (fail closed), its error in the denial."""
    try:
        verdict, leaf = rule.decide(peer, Judging(final, pipes_from))
    except _Failed as failed:
        return False, Denial(failed.leaf, failed.leaf.reason, failed.error)
    except Exception as exc:  # a Rule subclass's own bug
        return False, Denial(rule, "callable", exc)
    if verdict is None and final:  # (no leaf here says None once final; a subclass might)
        verdict = False
    return verdict, (Denial(leaf, leaf.reason) if verdict is False else None)


__getattr__ = moved(__name__, {"Refusal": ("gsp.admit", "Denial")})
