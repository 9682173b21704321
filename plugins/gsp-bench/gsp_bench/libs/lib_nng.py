"""pynng (nng itself, through its Python binding) on native threads: the reference gsp is
wire-compatible with.
"""

from __future__ import annotations

from typing import Any

from .. import tls
from .base import NngBinding, SPLib


class Nng(SPLib, NngBinding):
    name = "pynng"
    module, timed_out = "pynng", "Timeout"

    def _open(self, kind: str, timeout: float | None = None) -> Any:
        # pynng names sockets Push0, Pull0, Req0, ...; no size limit (the 1 MiB runs).
        options: dict[str, Any] = {"recv_max_size": 0}
        ms = self.recv_ms(kind, timeout)
        if ms is not None:
            options["recv_timeout"] = ms
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
