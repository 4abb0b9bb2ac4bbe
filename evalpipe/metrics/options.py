"""Run-level options that change how answers are scored (not which answers a model gives).

They are recorded in ``config.json`` so a number can always be traced to the settings that
produced it, and ``evalpipe score RUN`` can re-score with other settings without a model.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any


@dataclass(frozen=True)
class MetricOptions:
    #: ROUGE with Porter stemming (off by default, as in the CLUE reference)
    rouge_stemmer: bool = False
    #: BERTScore encoder: a local path or a hub name; None = the offline default
    bertscore_model: str | None = None
    #: BERTScore layer; required for a local path that bert-score does not know
    bertscore_num_layers: int | None = None
    bertscore_idf: bool = False
    #: rescaling baseline: a baseline file, "auto" (the file bert-score ships for the encoder), or
    #: None = no rescaling
    bertscore_baseline: str | None = None
    #: UMLS concept extractor name ("scispacy"), None = auto-detect, "none" = do not compute
    umls_extractor: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> MetricOptions:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in (data or {}).items() if k in known})
