"""Published reference rows for the CBLUE suite, for a run report to print beside a model's scores.

Source: Zhang N, Chen M, Bi Z, et al. *CBLUE: A Chinese Biomedical Language Understanding
Evaluation Benchmark.* ACL 2022 (arXiv:2106.08087), Table "CBLUE benchmark", and the same table
in github.com/CBLUEbenchmark/CBLUE's README. Numbers are on the **test** split, in **percent**
(evalpipe metrics are 0-1: multiply by 100 to compare), with each task's CBLUE metric: CMeEE,
CMeIE, CDN micro-F1; CTC, STS macro-F1; QIC, QTR, QQR accuracy. evalpipe evaluates the dev split
by default (test labels are hidden), so the comparison is indicative, not like for like.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

__all__ = ["BEST_BASELINE", "BEST_BASELINE_AVERAGE", "BEST_BASELINE_MODEL", "HUMAN", "HUMAN_AVERAGE", "TASK_ORDER"]

#: evalpipe task names in the paper's column order
TASK_ORDER = ("cmeee", "cmeie", "chip_cdn", "chip_ctc", "chip_sts", "kuake_qic", "kuake_qtr", "kuake_qqr")

#: human performance (percent)
HUMAN: Mapping[str, float] = MappingProxyType(dict(zip(
    TASK_ORDER, (67.0, 66.0, 65.0, 78.0, 93.0, 88.0, 71.0, 89.0))))
#: the paper's average of the eight human numbers
HUMAN_AVERAGE = 77.1

#: the best average among the paper's 11 pre-trained baselines
BEST_BASELINE_MODEL = "RoBERTa-wwm-ext-large"
BEST_BASELINE: Mapping[str, float] = MappingProxyType(dict(zip(
    TASK_ORDER, (61.8, 55.9, 55.7, 69.0, 85.2, 85.3, 62.8, 84.4))))
BEST_BASELINE_AVERAGE = 70.0
