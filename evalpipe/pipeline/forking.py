"""When a run may fork a helper process: the one rule the helpers beside the run's work share.

The run's helpers (:mod:`evalpipe.pipeline.render_beside`, :mod:`evalpipe.pipeline.score_beside`)
are forked, not spawned, so they have the very objects the run made (tasks, renderers, streams)
and nothing has to be rebuilt or pickled but their results. A fork is taken only where it is safe
and worth it: on Linux (forking is unsafe on macOS and absent on Windows), in a process with no
other thread (a fork copies every lock, held or not, and the thread holding it does not come
along), and for work of at least ``minimum`` items (a fork and a pipe cost more than a small job).
Each helper has a setting: ``0`` never, ``1`` whenever a fork exists (the tests), unset or ``auto``
by the rules above.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import threading
from collections.abc import Mapping

_NEVER = {"0", "no", "off", "false"}
_ALWAYS = {"1", "yes", "on", "true"}


def fork_wanted(setting: str, work: int, minimum: int, environ: Mapping[str, str] = os.environ) -> bool:
    """Whether to fork a helper for ``work`` items, under the environment variable ``setting``."""
    value = environ.get(setting, "auto").strip().lower()
    if value in _NEVER or work <= 0 or "fork" not in multiprocessing.get_all_start_methods():
        return False
    if value in _ALWAYS:
        return True
    return sys.platform == "linux" and work >= minimum and threading.active_count() == 1
