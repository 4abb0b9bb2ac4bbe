"""Settings for the whole test suite."""

import os

# a task whose declared metric aggregations do not reproduce its scorer's values fails loudly in
# tests (at run time the metric just loses its interval, with the reason in summary.json)
os.environ.setdefault("EVALPIPE_STRICT_AGGREGATIONS", "1")
# the embedded engine on one thread: beside the other test workers on shared cores, two threads wait
# for each other at every layer (evalpipe.engines.llamacpp.THREADS_ENV: 9 s alone, 180 s in the suite)
os.environ.setdefault("EVALPIPE_LLAMACPP_THREADS", "1")
