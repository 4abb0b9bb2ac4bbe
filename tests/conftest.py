"""Settings for the whole test suite."""

import os

# a task whose declared metric aggregations do not reproduce its scorer's values fails loudly in
# tests (at run time the metric just loses its interval, with the reason in summary.json)
os.environ.setdefault("EVALPIPE_STRICT_AGGREGATIONS", "1")
