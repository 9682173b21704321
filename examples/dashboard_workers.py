"""A live dashboard served by several worker processes: every page sees every worker's updates,
whichever worker its WebSocket landed on (docs/browsers.md, "Several workers").

    gunicorn -k gevent -w 2 -b 127.0.0.1:8080 --chdir examples dashboard_workers:application

then open http://127.0.0.1:8080/ (without ``--preload``: each worker imports this module itself).

Each worker makes its own updates (here: its pid and the requests it served) and publishes
them to the pages it serves through a PUB mounted at /sp. A page connects to one worker only,
so the workers fan their updates in through a hub: one PULL that every worker's PUSH dials, and
one PUB that every worker's SUB dials; each worker relays what its SUB gets to its own mount.
The hub lives in whichever worker claims its two addresses first; they are abstract Unix
sockets named after the gunicorn master (nothing on disk; two gunicorns never mix), so when
that worker exits they go with it, another worker claims them within a second, and every
worker's dialers redial it on their own.
"""

import json
import os
import time

import gevent

import gsp
from gsp_ws.wsgi import mount

GROUP = os.getppid()  # the master: the same for every worker of one gunicorn
HUB_IN = f"abstract://gsp-dashboard-{GROUP}-in"
HUB_OUT = f"abstract://gsp-dashboard-{GROUP}-out"
EVERY = 0.5  # seconds between a worker's updates

PAGE = b"""<!doctype html><title>workers</title><table id="workers"></table><script type="module">
import { socket } from "/sp/gsp.js";
const table = document.getElementById("workers"), seen = new Map();
const sub = socket("sub");
sub.subscribe("");
await sub.dial("/sp");
for (;;) {
  const update = JSON.parse(await sub.recvText());
  seen.set(update.pid, update);
  table.dataset.workers = seen.size;
  table.innerHTML = [...seen.values()].map(u =>
    `<tr><td>worker ${u.pid}</td><td>${u.served} requests</td><td>${u.at}</td></tr>`).join("");
}
</script>"""

served = 0


def app(environ, start_response):
    """The web app (a Flask or Django app in real life): here, the one page."""
    global served
    served += 1
    start_response("200 OK", [("Content-Type", "text/html; charset=utf-8")])
    return [PAGE]


def hub():
    """Claim the hub's addresses, or wait for them to be free; then pass every update on."""
    while True:
        pull = gsp.socket("pull")
        try:
            pull.listen(HUB_IN)
        except gsp.AddressInUse:  # another worker is the hub
            pull.close()
            gevent.sleep(1)
            continue
        with pull, gsp.socket("pub", listen=HUB_OUT) as out:
            while True:
                out.send(pull.recv())


def report(push):
    """This worker's updates, to the hub; dropped while there is none (no wait, no pile-up)."""
    while True:
        update = {"pid": os.getpid(), "served": served, "at": time.strftime("%H:%M:%S")}
        try:
            push.send(json.dumps(update).encode(), block=False)
        except gsp.WouldBlock:
            pass
        gevent.sleep(EVERY)


def relay(sub, pub):
    """Every worker's updates, from the hub to this worker's pages."""
    while True:
        pub.send(sub.recv())


pub = gsp.socket("pub")
application = mount(pub, app, "/sp")  # what gunicorn serves: the app, plus SP and gsp.js at /sp
to_hub = gsp.socket("push", dial=HUB_IN)    # dials keep redialing until the hub is there
from_hub = gsp.socket("sub", dial=HUB_OUT)
from_hub.subscribe(b"")
for job in (hub, lambda: report(to_hub), lambda: relay(from_hub, pub)):
    gevent.spawn(job)
