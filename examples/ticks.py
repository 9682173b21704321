"""docs/browsers.md's first example: a WSGI app whose page shows a tick a second, published by a
PUB socket mounted at /sp of the app (gevent-sp-ws).

    python examples/ticks.py [PORT]                      # gevent's own WSGI server, port 8080
    gunicorn -k gevent -w 1 -b 127.0.0.1:8080 --chdir examples ticks:application

then open http://127.0.0.1:8080/. tests/project/test_browsers_doc.py runs both.
"""

import sys
import time

import gevent

import gsp
from gsp_ws.wsgi import mount

PAGE = b"""<!doctype html><pre id="out">waiting for a tick</pre><script type="module">
import { socket } from "/sp/gsp.js";
const sub = socket("sub");
sub.subscribe("tick ");
await sub.dial("/sp");  // this page's host, ws:// or wss:// as the page; redials until it connects
for (;;) document.getElementById("out").textContent = await sub.recvText();
</script>"""


def app(environ, start_response):
    """Your WSGI app, whatever it is (a Flask or Django app): here, the one page."""
    start_response("200 OK", [("Content-Type", "text/html; charset=utf-8")])
    return [PAGE]


def publish(pub):
    while True:
        pub.send(f"tick {time.strftime('%H:%M:%S')}".encode())
        gevent.sleep(1)


pub = gsp.socket("pub")
application = mount(pub, app, "/sp")  # what the server serves: app, plus SP and gsp.js at /sp
gevent.spawn(publish, pub)            # runs in the process that imports this module

if __name__ == "__main__":
    from gevent.pywsgi import WSGIServer

    server = WSGIServer(("127.0.0.1", int(sys.argv[1]) if sys.argv[1:] else 8080), application)
    server.start()
    print(f"serving http://127.0.0.1:{server.server_port}/", flush=True)
    server.serve_forever()
