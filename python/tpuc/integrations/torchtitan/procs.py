"""Process helpers for launching TorchTitan under torchrun from tests and benchmarks: a free
loopback port for the rendezvous, and killing a launch's whole process tree.

torchrun starts each worker in a session of its own, so killing torchrun's process group
leaves the workers running; the tree is read from /proc instead (Linux only, as torchrun's
own agent is here)."""
from __future__ import annotations

import os
import signal
import socket


def free_port() -> int:
    """A TCP port free on 127.0.0.1 at the time of the call."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid``, children before grandchildren."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def kill_tree(pid: int) -> None:
    """SIGKILL every descendant of ``pid``, then ``pid``'s process group (``pid`` must lead
    one: start it with ``start_new_session=True``)."""
    for c in descendants(pid):
        try:
            os.kill(c, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
