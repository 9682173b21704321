"""pynng (nng itself, through its Python binding) on native threads: the reference gsp is
wire-compatible with.
"""

from __future__ import annotations

from typing import Any, Callable

from .. import tls
from .base import SPLib
from .runtime import Threads


class Nng(SPLib):
    name = "pynng"

    def __init__(self) -> None:
        import pynng
        super().__init__(Threads())
        self.nng: Any = pynng

    def _open(self, kind: str, timeout: float | None = None) -> Any:
        # pynng names sockets Push0, Pull0, Req0, ...; no size limit (the 1 MiB runs). A sub
        # thread gives up after a minute rather than hang on an end marker a PUB dropped.
        if kind == "sub" and timeout is None:
            timeout = 60.0
        options: dict[str, Any] = {"recv_max_size": 0}
        if timeout is not None:
            options["recv_timeout"] = int(timeout * 1000)
        return getattr(self.nng, kind.capitalize() + "0")(**options)

    def _tls(self, s: Any, url: str, server: bool) -> None:
        """tls+tcp and wss: the bench's certificates, as a pynng TLSConfig on the socket."""
        if not tls.secure(url):
            return
        f, cfg = tls.files(), self.nng.TLSConfig
        s.tls_config = cfg(cfg.MODE_SERVER, own_cert_string=f.read("cert"),
                           own_key_string=f.read("key")) if server else \
            cfg(cfg.MODE_CLIENT, ca_string=f.read("ca"), server_name=tls.SERVER_NAME)

    def _dial_tls(self, s: Any, url: str) -> dict[str, Any]:
        self._tls(s, url, server=False)
        return {}

    def listen(self, kind: str, url: str) -> tuple[Any, str]:
        s = self._open(kind)
        try:
            self._tls(s, url, server=True)
            lst = s.listen(url)
        except BaseException:
            s.close()
            raise
        return s, f"tcp://{lst.local_address}" if url.startswith("tcp://") else lst.url

    def serve_echo(self, listening: Any) -> Callable[[], None]:
        listening.recv_timeout = 100
        return self.serve_echo_polling(listening, self.nng.Timeout)
