#!/usr/bin/env bash
# A Spark standalone cluster from the pip-installed pyspark (no Spark download), for the gsp data
# source: a master and workers started with pyspark's own bin/spark-class, then the example
# pipeline run against it. The pip distribution has bin/spark-class but not sbin/start-*.sh.
#
#   examples/spark_standalone.sh master HOST              # on the master machine: spark://HOST:7077
#   examples/spark_standalone.sh worker spark://HOST:7077 [CORES] [MEMORY]   # on each worker machine
#   examples/spark_standalone.sh stop                     # stop what this script started here
#   examples/spark_standalone.sh demo [HOST]              # one machine: master + 2 workers +
#                                                         # examples/spark_pipeline.py, then stop
#   examples/spark_standalone.sh lose-worker [ROWS] [PATHS]   # one machine: master + 2 workers;
#       the gsp sink (push, req) and source (pull, rep) each move ROWS (100000) rows while a
#       worker is SIGKILLed; reports rows/s, recovery and duplicates; cleans up (all on
#       127.0.0.1, random ports; plugins/gsp-spark/tests/spark_standalone.py, which the tests run too)
#
# Every machine needs Java 17+ and the same Python with gsp, gevent-sp-spark and pyspark
# installed at the same path (executors start Python workers with the driver's PYSPARK_PYTHON);
# run this with that Python first on PATH or set PYTHON. Logs and pids go to $GSP_SPARK_RUN
# (default /tmp/gsp-spark-standalone). SPARK_LOCAL_IP, if set, is the address the daemons bind.
set -euo pipefail
PYTHON=${PYTHON:-python3}
RUN=${GSP_SPARK_RUN:-/tmp/gsp-spark-standalone}
SPARK_HOME=$("$PYTHON" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')
export SPARK_HOME
export PYSPARK_PYTHON=${PYSPARK_PYTHON:-$("$PYTHON" -c 'import sys; print(sys.executable)')}

start() {  # start NAME CLASS ARGS...: a daemon in the background, its pid in $RUN/NAME.pid
    local name=$1; shift
    mkdir -p "$RUN"
    nohup "$SPARK_HOME/bin/spark-class" "$@" >"$RUN/$name.log" 2>&1 &
    echo $! >"$RUN/$name.pid"
    echo "started $name (pid $!, log $RUN/$name.log)"
}

wait_log() {  # wait_log NAME PATTERN: until the daemon's log shows PATTERN (60 s at most)
    for _ in $(seq 120); do
        grep -q "$2" "$RUN/$1.log" 2>/dev/null && return 0
        sleep 0.5
    done
    echo "$1 did not report '$2' within 60 s; see $RUN/$1.log" >&2
    return 1
}

stop_all() {
    for f in "$RUN"/*.pid; do
        [ -e "$f" ] || continue
        kill "$(cat "$f")" 2>/dev/null || true
        rm -f "$f"
    done
}

case ${1:-} in
master)
    host=${2:?usage: $0 master HOST}
    # 7077: workers and drivers connect here; 8080: the master's web UI.
    start master org.apache.spark.deploy.master.Master --host "$host" --port 7077 --webui-port 8080
    wait_log master "Starting Spark master at"
    ;;
worker)
    master=${2:?usage: $0 worker spark://HOST:7077 [CORES] [MEMORY]}
    n=0
    while [ -e "$RUN/worker-$n.pid" ]; do n=$((n + 1)); done
    # A worker binds a random port for the master and launches executors, whose ports are random
    # too unless spark.blockManager.port / spark.driver.port etc. are pinned.
    start "worker-$n" org.apache.spark.deploy.worker.Worker "$master" \
        --cores "${3:-1}" --memory "${4:-1g}" --webui-port $((8081 + n)) \
        --work-dir "$RUN/work-$n"
    wait_log "worker-$n" "Successfully registered with master"
    ;;
stop)
    stop_all
    ;;
lose-worker)
    rows=${2:-100000}
    exec "$PYTHON" "$(dirname "$0")/../plugins/gsp-spark/tests/spark_standalone.py" \
        --rows "$rows" ${3:+--paths "$3"}
    ;;
demo)
    host=${2:-127.0.0.1}
    export SPARK_LOCAL_IP=$host  # the daemons bind this address, not every interface
    trap stop_all EXIT
    "$0" master "$host"
    "$0" worker "spark://$host:7077" 1 1g
    "$0" worker "spark://$host:7077" 1 1g
    "$PYTHON" "$(dirname "$0")/spark_pipeline.py" --master "spark://$host:7077" --host "$host" \
        --timeout 180
    ;;
*)
    sed -n '2,20p' "$0"
    exit 2
    ;;
esac
