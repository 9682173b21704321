"""What the probes that run in a network namespace of their own share (blackhole_probe.py,
netfault_probe.py; imported from the script's own directory, first on ``sys.path``): finding
iproute2's commands and asking whether ``lo`` is up."""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
import struct
import sys

SIOCGIFFLAGS, IFF_UP = 0x8913, 0x1


def tool(name: str) -> str:
    """The path of iproute2's ``name`` (ip, tc), also where /sbin is not on PATH."""
    path = shutil.which(name, path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin",
                                                    "/sbin"]))
    if path is None:
        probe = os.path.splitext(os.path.basename(sys.argv[0]))[0]
        raise SystemExit(f"{probe}: {name!r} (iproute2) is not installed")
    return path


def lo_is_up() -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        flags = fcntl.ioctl(s, SIOCGIFFLAGS, struct.pack("16sH", b"lo", 0))
    return bool(struct.unpack("16sH", flags[:18])[1] & IFF_UP)
