"""The sample browser: every answer behind the report's numbers, filterable, inside ``report.html``.

The browser is one HTML fragment — a ``<section id="samples">`` holding the samples as JSON in a
``<script type="application/json">`` block plus an inline stylesheet and an inline vanilla-JS program
(``browser_assets/``). It needs no network and no library, so the report still works when it is
mailed and opened from a ``file://`` URL. The component computes nothing: metrics, outcomes and
entity categories arrive in :class:`BrowserData` and are only shown and filtered.

Why the state lives in the URL fragment: a link such as
``report.html#samples?run=r1&outcome=missed`` reproduces a view for whoever opens it (a reviewer
reaches the missed entities behind a recall number in two clicks). :func:`samples_fragment` builds
such links in Python with the same parameter names and order as the page writes them itself.

Why JSON in a data block and not a JS literal: ``JSON.parse`` is faster than parsing an object
literal of 20 000 samples, and the block cannot run. The one way for data to break out of a
``<script>`` element is the text ``</script`` (and ``<!--`` can change how the HTML parser reads the
block), so every ``<``, ``>`` and ``&`` in the JSON is written as a ``\\u00XX`` escape, which JSON
reads back as the same character (these characters only occur inside JSON strings).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from html import escape
from importlib.resources import files
from typing import Any, Literal, NotRequired, TypedDict
from urllib.parse import urlencode

from evalpipe import jsonfast

__all__ = [
    "BrowserData",
    "BrowserRun",
    "BrowserSample",
    "BrowserTask",
    "Entity",
    "FRAGMENT_KEYS",
    "PAGE_SIZE",
    "RunResult",
    "SplicedSample",
    "WrittenSample",
    "iter_sample_browser",
    "json_for_script",
    "json_string",
    "render_sample_browser",
    "samples_fragment",
    "standalone_page",
    "validate",
]

#: rows on one page of the browser (the page number is part of the URL fragment)
PAGE_SIZE = 50
#: the parameters of ``#samples?…`` in the order both this module and the page write them
FRAGMENT_KEYS = ("task", "run", "compare", "outcome", "parse", "sample", "q", "page")

_ASSETS = files("evalpipe.report") / "browser_assets"


# ---- the data contract ----------------------------------------------------------------------------
# TypedDicts document the JSON the page reads; render_sample_browser() takes any Mapping of this shape.

class BrowserRun(TypedDict):
    #: short stable key used in samples[].runs and in the URL (``r0``, ``r1`` …)
    key: str
    #: what a reader calls the run (the model name)
    label: str
    path: NotRequired[str]


class BrowserTask(TypedDict):
    name: str
    kind: NotRequired[str]
    #: per-sample score keys in display order (others follow alphabetically)
    score_keys: NotRequired[Sequence[str]]
    #: the input field entity offsets index into: a list (token offsets) or a string (character
    #: offsets). Default as :func:`evalpipe.report.ner_errors.span_text`: ``tokens`` when the input
    #: has it, else ``text``.
    span_field: NotRequired[str]


class Entity(TypedDict):
    side: Literal["gold", "pred"]
    text: str
    label: str
    #: ner_errors category: correct, type, boundary, boundary+type, missed (gold), spurious (pred)
    category: str
    start: NotRequired[int]
    end: NotRequired[int]


class RunResult(TypedDict, total=False):
    answer: str | None
    #: the API's separate reasoning text, where the endpoint sent one (never scored)
    reasoning: str
    prediction: Any
    prediction_text: str
    #: per-sample scores; None (JSON null) where a score is undefined for the sample
    scores: Mapping[str, float | int | None]
    parse_failed: bool | None
    #: why the request failed (None when it did not)
    error: str | None
    diagnostics: Mapping[str, Any]
    #: the categories present in this sample for this run (correct, missed, parse_failure, error …)
    outcomes: Sequence[str]
    entities: Sequence[Entity]
    judge: Mapping[str, Any]


class BrowserSample(TypedDict):
    task: str
    id: str
    input: Mapping[str, Any]
    gold: NotRequired[Any]
    gold_text: NotRequired[str]
    #: run key → that run's result for this sample (a run may lack a sample)
    runs: Mapping[str, RunResult]


class BrowserData(TypedDict):
    runs: Sequence[BrowserRun]
    tasks: Sequence[BrowserTask]
    samples: Sequence[BrowserSample]


# ---- validation -----------------------------------------------------------------------------------

def validate(data: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` (one line naming the sample and field) where ``data`` breaks the contract.

    Checked: the three lists exist; run keys and task names are unique; every sample names a known
    task, has an ``id`` and an ``input`` mapping, and its ``runs`` use known run keys; ``outcomes``
    and ``entities`` are lists. Values are not checked further: the page shows what it is given.
    """
    for field in ("runs", "tasks", "samples"):
        if not isinstance(data.get(field), (list, tuple)):
            raise ValueError(f"sample browser data: '{field}' must be a list")
    run_keys = [r.get("key") for r in data["runs"]]
    if not run_keys or any(not isinstance(k, str) or not k for k in run_keys) or len(set(run_keys)) != len(run_keys):
        raise ValueError(f"sample browser data: runs need unique non-empty string keys (got {run_keys!r})")
    names = [t.get("name") for t in data["tasks"]]
    if any(not isinstance(n, str) or not n for n in names) or len(set(names)) != len(names):
        raise ValueError(f"sample browser data: tasks need unique non-empty names (got {names!r})")
    _validate_samples(data["samples"], set(run_keys), set(names))


def _validate_samples(samples: Iterable[Mapping[str, Any]], known_runs: set[str], known_tasks: set[str],
                      start: int = 0) -> None:
    """:func:`validate` of samples (the ``start``-th first) against the known run keys and task names."""
    for i, sample in enumerate(samples, start):
        where = f"sample browser data: samples[{i}]"
        if sample.get("task") not in known_tasks:
            raise ValueError(f"{where}.task: {sample.get('task')!r} is not one of tasks[].name")
        if not isinstance(sample.get("id"), str):
            raise ValueError(f"{where}.id: must be a string (got {sample.get('id')!r})")
        if not isinstance(sample.get("input", {}), Mapping):
            raise ValueError(f"{where}.input: must be an object (sample {sample['id']!r})")
        runs = sample.get("runs")
        if not isinstance(runs, Mapping):
            raise ValueError(f"{where}.runs: must be an object keyed by run key (sample {sample['id']!r})")
        for key, result in runs.items():
            if key not in known_runs:
                raise ValueError(f"{where}.runs: {key!r} is not one of runs[].key (sample {sample['id']!r})")
            if not isinstance(result, Mapping):
                raise ValueError(f"{where}.runs.{key}: must be an object (sample {sample['id']!r})")
            for field in ("outcomes", "entities"):
                if result.get(field) is not None and not isinstance(result[field], (list, tuple)):
                    raise ValueError(f"{where}.runs.{key}.{field}: must be a list (sample {sample['id']!r})")


# ---- serialisation --------------------------------------------------------------------------------

def _finite(value: Any) -> Any:
    """``value`` with NaN/±inf floats replaced by None (JSON has no NaN; an undefined score is null)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if hasattr(value, "tolist"):  # numpy scalars and arrays
        return _finite(value.tolist())
    return value


def _jsonable(value: Any) -> Any:
    """Fallback for ``json.dumps``: numpy scalars and arrays via ``.tolist()``; anything else as ``str``."""
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


def json_for_script(data: Any) -> str:
    """``data`` as JSON that is safe as the text of a ``<script>`` element.

    ``<``, ``>``, ``&`` (and the JS line separators U+2028/2029) are written as ``\\uXXXX``
    escapes, so no ``</script``, ``<!--`` or ``]]>`` can appear in the text, while ``JSON.parse``
    returns the original strings. NaN and infinities (which JSON lacks) become ``null``, an
    undefined score. Kept fast for 94,000 samples: orjson writes it where its text is ``json``'s
    (:func:`evalpipe.jsonfast.compact`, NaN as null too), the data is walked to replace NaN only
    when the C encoder refuses it, and the escapes are whole-string replacements.
    """
    text = jsonfast.compact(data, _jsonable)
    if text is None:
        try:
            text = _ENCODE(data)
        except ValueError:  # a NaN or infinity somewhere
            text = _ENCODE(_finite(data))
    return _escaped(text)


def json_string(text: str) -> str:
    """:func:`json_for_script` of a string (the same text, without the general path's checks)."""
    return _escaped(_STRING(text))


def _escaped(text: str) -> str:
    """JSON text with ``<``, ``>``, ``&``, U+2028 and U+2029 written as ``\\uXXXX`` (see :func:`json_for_script`)."""
    for char, escaped in _ESCAPES:
        if char in text:
            text = text.replace(char, escaped)
    return text


_ESCAPES = (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029"))
#: ``json.dumps`` with these arguments, its encoder made once (json.dumps makes one per call)
_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=_jsonable).encode
#: a string as JSON, as the encoder above writes it (before the escapes)
_STRING = json.encoder.encode_basestring


def _asset(name: str, closing: str) -> str:
    """An asset's text, refused if it holds what would end (or, ``<!--``, confuse) its inline element."""
    text = (_ASSETS / name).read_text(encoding="utf-8")
    for bad in (closing, "<!--"):
        if bad in text.lower():
            raise RuntimeError(f"browser asset {name} contains {bad!r}")
    return text


# ---- rendering ------------------------------------------------------------------------------------

def samples_fragment(*, task: str | None = None, run: str | None = None, compare: str | None = None,
                     outcome: str | None = None, parse: Literal["failed", "ok"] | None = None,
                     sample: str | None = None, q: str | None = None, page: int | None = None) -> str:
    """The URL fragment that opens the browser on a view, e.g. ``#samples?run=r1&outcome=missed``.

    Parameters (all optional; an omitted one means "any"): ``task`` name; ``run`` key (rows of
    that run only); ``compare`` another run key, shown beside ``run`` on the same sample (ignored
    without ``run``); ``outcome`` a category from the rows' ``outcomes``; ``parse`` ``failed`` or
    ``ok``; ``sample`` a sample id; ``q`` free text (every word must occur, case-insensitive, in
    the id, input, gold or the answers); ``page`` 1-based, of :data:`PAGE_SIZE` rows. Encoded as
    ``URLSearchParams`` writes it (space as ``+``, ``+`` as ``%2B``), so the page reads it back.
    """
    values = {"task": task, "run": run, "compare": compare, "outcome": outcome, "parse": parse,
              "sample": sample, "q": q, "page": None if page in (None, 1) else str(page)}
    pairs = [(k, values[k]) for k in FRAGMENT_KEYS if values[k] not in (None, "")]
    return "#samples" + ("?" + urlencode(pairs) if pairs else "")


#: samples serialised per piece of the streamed page (:func:`iter_sample_browser`)
BATCH = 500


_MISSING = object()


@dataclass(frozen=True)
class SplicedSample:
    """A sample of the browser's data whose ``input`` is already its JSON text (as
    :func:`json_for_script` writes it): made once, while the run's records were read, it is put
    into the page as it is instead of being decoded and encoded again
    (:mod:`evalpipe.report.browser_spool`). ``sample`` holds the other fields, in the order the
    page writes them, ``input`` going after ``id``."""

    sample: Mapping[str, Any]
    input_json: str

    def text(self) -> str:
        """:func:`json_for_script` of :meth:`as_dict`: JSON with these separators is the concatenation
        of its members' texts, and the escapes replace single characters, so each piece is escaped alone."""
        sample = self.sample
        head = "".join(f'"{k}":{json_string(v) if isinstance(v, str) else json_for_script(v)},'
                       for k in ("task", "id") if (v := sample.get(k, _MISSING)) is not _MISSING)
        rest = {k: v for k, v in sample.items() if k != "task" and k != "id"}
        return "{" + head + '"input":' + self.input_json + ("," + json_for_script(rest)[1:] if rest else "}")

    def as_dict(self) -> dict[str, Any]:
        """The sample as a dict, ``input`` decoded, in the page's order of fields."""
        out: dict[str, Any] = {k: self.sample[k] for k in ("task", "id") if k in self.sample}
        out["input"] = json.loads(self.input_json)
        out.update((k, v) for k, v in self.sample.items() if k not in ("task", "id"))
        return out


@dataclass(frozen=True)
class WrittenSample:
    """A sample of the browser's data whose whole JSON text is made already (as :func:`json_for_script`
    writes it), from pieces made when the runs were written (:mod:`evalpipe.report.extract`): put into
    the page as it is. ``sample`` is what :func:`_validate_samples` checks of it (its task, id, run keys
    and outcomes; its input and entities were checked as the pieces were read)."""

    #: None: checked already, as the texts it is made of were read
    sample: Mapping[str, Any] | None
    written: str

    def text(self) -> str:
        return self.written

    def as_dict(self) -> dict[str, Any]:
        """The sample as a dict (its text decoded), in the page's order of fields."""
        decoded: dict[str, Any] = json.loads(self.written)
        return decoded


#: samples whose text is made otherwise than by serialising a dict
_MADE = (SplicedSample, WrittenSample)


def _batch_text(batch: Sequence[Any]) -> str:
    """The members of :func:`json_for_script` of ``batch`` (a list), without its brackets."""
    if not any(isinstance(s, _MADE) for s in batch):
        return json_for_script(batch)[1:-1]
    return ",".join(s.text() if isinstance(s, _MADE) else json_for_script(s) for s in batch)


def _checked(batch: Sequence[Any]) -> list[Any]:
    """What :func:`_validate_samples` checks of each sample (a spliced sample's input is a JSON object's text)."""
    return [s.sample if isinstance(s, _MADE) else s for s in batch if not (isinstance(s, _MADE) and s.sample is None)]

def _json_pieces(data: Mapping[str, Any], samples: Iterable[Any], count: int,
                 rows: tuple[int, int] | None = None) -> Iterator[str]:
    """The text :func:`json_for_script` makes of ``{**data, "samples": [*samples]}`` (``samples`` in
    ``data``'s place when it has the key, else last), in pieces of :data:`BATCH` samples, each
    checked (:func:`_validate_samples`) as it is made — so neither the samples nor their JSON are
    ever held whole. The pieces joined are exactly the text of the whole (JSON with these separators
    is the concatenation of its members' texts).

    ``rows`` (start, stop): ``samples`` are only the rows start..stop of the ``count``, and the text
    is only theirs — with what goes before the samples when start is 0, what goes after them when
    stop is ``count``: the texts of consecutive ranges joined are the text of the whole."""
    start, stop = rows if rows is not None else (0, count)
    known_runs = {r.get("key") for r in data["runs"]}
    known_tasks = {t.get("name") for t in data["tasks"]}
    keys = [*data.keys(), *(() if "samples" in data else ("samples",))]
    at = keys.index("samples")
    if start == 0:
        for n, key in enumerate(keys[:at]):
            yield ("{" if n == 0 else ",") + json_for_script(key) + ":" + json_for_script(data[key])
        yield ("{" if at == 0 else ",") + json_for_script("samples") + ":["
    batch: list[Any] = []
    written = start
    for sample in samples:
        batch.append(sample)
        if len(batch) == BATCH:
            _validate_samples(_checked(batch), known_runs, known_tasks, written)
            yield ("," if written else "") + _batch_text(batch)
            written += len(batch)
            batch = []
    if batch:
        _validate_samples(_checked(batch), known_runs, known_tasks, written)
        yield ("," if written else "") + _batch_text(batch)
        written += len(batch)
    if written != stop:
        raise ValueError(f"sample browser data: {written - start} samples in rows {start}..{stop}"
                         if rows is not None else f"sample browser data: {written} samples, announced {count}")
    if stop == count:
        yield "]"
        for key in keys[at + 1:]:
            yield "," + json_for_script(key) + ":" + json_for_script(data[key])
        yield "}"


def iter_sample_browser(data: Mapping[str, Any],
                        samples: Iterable[Mapping[str, Any] | SplicedSample | WrittenSample] | None = None,
                        count: int | None = None, rows: tuple[int, int] | None = None) -> Iterator[str]:
    """:func:`render_sample_browser` in pieces, for writing straight into a file.

    ``samples`` (with their ``count``) stand for ``data["samples"]``: an iterable that makes them one
    at a time (:class:`evalpipe.report.browser_data.BrowserRows`), serialised :data:`BATCH` at a time.
    Everything but the samples is checked before the first piece; each sample as it is serialised.
    ``rows`` (start, stop): ``samples`` are those rows of the ``count`` only, and so is the text —
    the page's part of them (with the browser's opening when start is 0, its end when stop is
    ``count``; so a part is never empty): the parts of consecutive ranges joined are the whole
    browser, byte for byte, so two processes can each write one (:mod:`evalpipe.report.browser_beside`).
    """
    if samples is None:
        validate(data)
        samples, count = data["samples"], len(data["samples"])
    else:
        validate({**data, "samples": ()})
    if count is None:
        raise ValueError("sample browser: streamed samples need their count")
    start, stop = rows if rows is not None else (0, count)
    if not (0 <= start < stop <= count or start == stop == count == 0):  # an empty part would be ambiguous
        raise ValueError(f"sample browser: rows {start}..{stop} are not a part of the {count} samples")
    if start == 0:
        yield from _opening(data, count)
    yield from _json_pieces(data, samples, count, rows)
    if stop == count:
        yield f'</script><script>{_asset("browser.js", "</script")}</script></section>'


def _opening(data: Mapping[str, Any], count: int) -> Iterator[str]:
    yield (
        f'<section id="samples" class="sb" aria-labelledby="samples-title">'
        f'<h2 id="samples-title">Samples</h2>'
        f'<style>{_asset("browser.css", "</style")}</style>'
        f'<noscript><p>The sample browser needs JavaScript ({count} samples, {len(data["runs"])} runs).</p></noscript>'
        f'<div class="sb-app" data-page-size="{PAGE_SIZE}"></div>'
        f'<script type="application/json" id="samples-data">'
    )


def render_sample_browser(data: Mapping[str, Any]) -> str:
    """The browser as an HTML fragment (``<section id="samples">…</section>``) for a report body.

    ``data`` follows :class:`BrowserData` (checked by :func:`validate`). The fragment carries its
    own ``<style>`` (every rule scoped to ``#samples``) and ``<script>``; put it once per page.
    """
    return "".join(iter_sample_browser(data))


_PAGE_STYLE = ('body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto; '
               "max-width: 1400px; padding: 0 1em; color: #222; } h1 { font-size: 1.6em; }")


def standalone_page(data: Mapping[str, Any], title: str = "Samples") -> str:
    """A complete HTML document holding only the browser (same base style as ``report.html``)."""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title><style>{_PAGE_STYLE}</style></head><body>"
        f"<h1>{escape(title)}</h1>{render_sample_browser(data)}</body></html>\n"
    )
