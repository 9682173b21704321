"""``gsp bench`` / ``python -m gsp_bench``: gsp's performance, side by side with pynng, pyzmq,
zmq.green and a raw gevent socket baseline.

* :mod:`.cli`     the command line (``gsp bench -h``)
* :mod:`.cases`   what to run: workloads at fixed parameters, and their table rows
* :mod:`.runner`  running a case: worker processes, their words, medians of repeated runs
* :mod:`.report`  the table, the JSON document and the plot
* :mod:`.ctl`     the control channel between the runner and a worker
* :mod:`.worker`  a worker process (``python -m gsp_bench.worker``, started by the runner)
* :mod:`.libs`    each library's sockets, and the roles every workload is made of
"""

from .cli import main

__all__ = ["main"]
