"""``<run>/contamination.json``: the probe's result, written and read without any backend.

The report reads it from the run directory (:mod:`evalpipe.report.contamination`), so this module
imports nothing that talks to a model. Fields (``docs/contamination.md`` explains each):
``task``, ``dataset``, ``split``, ``verdict``, ``guided_rougeL``, ``general_rougeL``,
``difference`` {value, ci_low, ci_high, resamples, seed, level, method}, ``exact``, ``near_exact``,
``n`` (probed samples with both answers), ``skipped`` {count, min_tokens, ids}, ``errors`` {count,
ids}, ``min_k_prob`` ({available, k, test_mean, reference_mean, difference, n_test, n_reference}
or {available: false, reason}), ``samples`` (per-sample values) and ``settings``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

RESULT_FILE = "contamination.json"
#: the fields a result must have to be shown
REQUIRED = ("task", "verdict", "guided_rougeL", "general_rougeL", "difference", "exact", "near_exact", "n")


def result_path(run: Path) -> Path:
    return Path(run) / RESULT_FILE


def read_result(run: Path) -> dict[str, Any] | None:
    """The probe's result in run directory ``run`` (None when it has none); a file that is not a
    probe result is a ValueError naming it."""
    path = result_path(run)
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from None
    missing = [f for f in REQUIRED if not isinstance(data, dict) or f not in data]
    if missing:
        raise ValueError(f"{path}: not a contamination probe result (missing {', '.join(missing)})")
    return cast("dict[str, Any] | None", data)


def _num(value: Any) -> str:
    return "–" if value is None else f"{value:.3f}"


def summary_text(result: dict[str, Any]) -> str:
    """The probe's result in one line (printed by the command, shown by the report)."""
    diff = result.get("difference") or {}
    interval = (f" [{_num(diff.get('ci_low'))}, {_num(diff.get('ci_high'))}]"
                if diff.get("ci_low") is not None else "")
    text = (f"{result['task']}: {result['verdict']} — guided ROUGE-L {_num(result['guided_rougeL'])}, general "
            f"{_num(result['general_rougeL'])}, difference {_num(diff.get('value'))}{interval}; exact "
            f"{result['exact']}, near-exact {result['near_exact']} of {result['n']} probed")
    skipped = (result.get("skipped") or {}).get("count")
    if skipped:
        text += f" ({skipped} skipped: too short)"
    min_k = result.get("min_k_prob") or {}
    if min_k.get("available"):
        text += f"; Min-{min_k.get('k'):g}% Prob test {_num(min_k.get('test_mean'))}"
        if min_k.get("reference_mean") is not None:
            text += f", reference {_num(min_k.get('reference_mean'))}, difference {_num(min_k.get('difference'))}"
    elif min_k:
        text += "; Min-K % Prob not available"
    return text
