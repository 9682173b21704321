#!/bin/bash
# The single-pipe performance bar (docs/performance.md), each command three times, one after another:
#
#     bash tests/tools/bar.sh VENV OUT
#
# VENV is a virtualenv with gsp installed as users get it (a wheel: `pip install <checkout>
# pyzmq pynng`), OUT the file the tables go to. It runs from /tmp so the checkout's own gsp/ is
# not imported. mangos and nng are built by the bench where it can (Go with mangos in the module
# cache, or GOFLAGS=-modfile=... for a vendored copy; Debian's libnng-dev); the bench says which
# it skipped and why. docs/performance.md, "Today's figures and targets", has what it gave.
set -euo pipefail
venv=$(cd "$1" && pwd)
out=$(realpath "$2")
cd /tmp
for i in 1 2 3; do
  for args in "thr --libs raw-gevent,pyzmq,nng,mangos --repeat 3 --size 16" \
              "thr --libs raw-gevent,pyzmq,nng,mangos --repeat 3 --size 65536" \
              "thr --libs raw-gevent,pyzmq,nng,mangos --repeat 3 --size 1048576" \
              "lat --libs raw-gevent,gsp-spin,pyzmq,mangos --repeat 3 --count 10000" \
              "reqrep --procs 2 --libs raw-gevent,pyzmq,mangos --repeat 3 --count 50000" \
              "reqrep --procs 2 --conns 2 --libs raw-gevent,pyzmq,mangos --repeat 3 --count 50000"; do
    echo "=== run $i $(date +%H:%M:%S) gsp bench $args"
    # shellcheck disable=SC2086
    "$venv/bin/python" -m gsp bench $args --quiet 2>&1
  done
done > "$out"
echo "finished $(date +%H:%M:%S)" >> "$out"
