"""Worker processes end with the process that started them.

A pool's workers (the import's parse pool, the compile pool, a GPU measurement worker) wait
on queues or pipes; when their parent is killed outright (SIGKILL, the OOM killer) nothing
tells them, and each would live on holding its memory. ``exit_with_parent``, run first in a
worker, starts a thread that ends the worker within ``POLL_S`` of its parent's death (the
worker is then re-parented, so its parent process id changes).

>>> callable(exit_with_parent)
True
"""

from __future__ import annotations

import os
import threading
import time

POLL_S = 0.5


def exit_with_parent() -> None:
    """In a worker process: exit (status 0, no clean-up) once its parent process is gone."""
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(POLL_S)
            if os.getppid() != parent:
                os._exit(0)

    threading.Thread(target=watch, name="kgen-parent-watch", daemon=True).start()
