"""How the loop learns that an agent process exited: a pidfd per child instead of a thread per child.

Python 3.11's default child watcher starts a thread per subprocess to block in
``waitpid``: at every agent start a thread start and a handshake with it, on the
loop's thread, and GIL traffic while it lives. Linux (5.3 and later) gives a
pidfd that becomes readable when the child exits, which the loop's own selector
watches. Python 3.12 made that the default; on 3.11 it is chosen here when the
kernel (and any seccomp filter) allows pidfds, and the default stays otherwise.
"""

from __future__ import annotations

import asyncio
import os
import sys
import warnings


def pidfd_works() -> bool:
    """Whether this system lets us open a pidfd."""
    if not hasattr(os, "pidfd_open"):
        return False
    try:
        fd = os.pidfd_open(os.getpid())
    except OSError:
        return False
    os.close(fd)
    return True


def use_pidfd_watcher() -> bool:
    """On Python 3.11 with working pidfds, give the running loop ``asyncio.PidfdChildWatcher``; True if it did."""
    if sys.version_info >= (3, 12) or not pidfd_works():
        return False  # 3.12 and later use pidfds by default, and deprecate choosing a watcher
    watcher = asyncio.PidfdChildWatcher()
    watcher.attach_loop(asyncio.get_running_loop())  # the policy attaches a watcher only when a loop is set
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        asyncio.set_child_watcher(watcher)
    # at the very end asyncio detaches it; an agent adopted or left to its keeper is not ours to wait for
    warnings.filterwarnings("ignore", message="A loop is being detached from a child watcher", category=RuntimeWarning)
    return True
