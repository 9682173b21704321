import pytest

import gsp
from tests.support import nng


def test_push_pull_tcp_roundtrip():
    with gsp.socket("pull", listen="tcp://127.0.0.1:0", recv_timeout=5) as pull:
        with gsp.socket("push", dial=pull.listeners[0].url, send_timeout=5) as push:
            push.send(b"hello")
            assert pull.recv() == b"hello"


@pytest.mark.interop
def test_gsp_listens_pynng_dials_tcp():
    with gsp.socket("pull", listen="tcp://127.0.0.1:0", recv_timeout=5) as pull:
        s = nng.socket("push")
        try:
            nng.run(s.dial, pull.listeners[0].url, block=True)
            nng.run(s.send, b"from nng")
            assert pull.recv() == b"from nng"
        finally:
            s.close()
