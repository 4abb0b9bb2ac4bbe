"""Which endpoint gave a run's stored answers, so the same command pointed at another server never
reuses them silently.

Why: a run directory is named by what changes an answer (model *name*, prompts, decoding …) and the
store's key deliberately leaves the server's URL out (a restarted server on another port must not
invalidate finished work). So ``--base-url B`` after ``--base-url A`` for the same model name found
every answer A gave, sent B nothing, and reported A's numbers as B's (issue 21) — a team that
re-serves a new checkpoint under the old name got the old model's results without a word.

**What is recorded** (in the store, ``responses.sqlite`` table ``meta``, key ``endpoints``: the
answers and what gave them travel together), one entry per endpoint that answered:

* a server you started: its base URLs as recorded everywhere (no credentials, no query), replicas
  of one model together as *one* identity, and its ``GET /v1/models`` entry for the model — the
  fields that describe it (``id``, ``owned_by``, ``root``, ``parent``, ``max_model_len``; vLLM's
  ``root`` is the checkpoint's path), not those that change on every call (``created``,
  ``permission``);
* an engine evalpipe starts on a random loopback port: engine, model (or GGUF) with its local
  fingerprint, the engine settings and context length — never the port;
* the ``system_fingerprint`` values its replies carried (OpenAI-style providers), with counts.

**The check**, under the run directory's lock before any request: when the store holds answers
and the endpoint now asked differs — none of its URLs among the recorded ones, or another
``/v1/models`` entry, or another engine — the run stops with one line naming both. Why stop instead
of asking the new server again: asking again would overwrite the first server's answers (work
lost) or mix two servers' answers in one result; stopping costs nothing and leaves the choice:
``--run-name`` for a directory of its own, or ``--reuse-answers-from-other-endpoint`` to reuse them
deliberately (the flag is in ``config.json``, and the store marks that identity ``reused``).
A store written before identities existed is adopted by the first run that opens it (a note says so).

**What cannot be detected**: a new checkpoint served under the same name at the same URL with the
same ``/v1/models`` entry (llama.cpp's server, OpenAI's API and most proxies list no path or hash),
and a provider changing the model behind a name; a ``system_fingerprint`` that changes is recorded
and noted, not refused (providers change it with their serving configuration). A URL check needs no
request, so it works for a run whose answers are all stored; the ``/v1/models`` entry is compared
only when there is something to send (otherwise the endpoint is not contacted at all).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from evalpipe.config import RunConfig
from evalpipe.endpoints import redact_url
from evalpipe.outcome import RunError

#: the key of the identities in the store's ``meta`` table
META_KEY = "endpoints"
#: the fields of a ``/v1/models`` entry that describe the model (others change on every call)
ENTRY_FIELDS = ("id", "owned_by", "root", "parent", "max_model_len")


@dataclass(frozen=True)
class EndpointIdentity:
    """What served (or is about to serve) a run's answers; see the module docstring."""

    #: "endpoint" (a server at URLs) or "engine" (started by evalpipe)
    kind: str
    model: str
    #: the base URLs, credentials removed, sorted (replicas of one model are one identity)
    urls: tuple[str, ...] = ()
    #: an engine's identity: engine, model fingerprint, settings, context length
    engine: Mapping[str, Any] | None = None
    #: the ``/v1/models`` entry's describing fields, when asked
    entry: Mapping[str, Any] | None = None
    #: ``system_fingerprint`` → answers that carried it
    fingerprints: Mapping[str, int] = field(default_factory=dict)
    #: added with ``--reuse-answers-from-other-endpoint``
    reused: bool = False

    def label(self) -> str:
        """The identity in a few words, for the one-line error."""
        if self.kind == "engine":
            settings = {k: v for k, v in (self.engine or {}).items() if v not in (None, {}, "")}
            return f"the {settings.pop('engine', 'local')} engine evalpipe started ({', '.join(f'{k} {v}' for k, v in settings.items())})"
        described = ", ".join(f"{k} {v}" for k, v in (self.entry or {}).items() if k != "id")
        return " + ".join(self.urls) + f" (model {self.model!r}" + (f"; {described}" if described else "") + ")"

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "model": self.model, "urls": list(self.urls), "engine": self.engine,
                "entry": self.entry, "fingerprints": dict(self.fingerprints), "reused": self.reused,
                "recorded": time.strftime("%Y-%m-%dT%H:%M:%S%z")}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EndpointIdentity:
        return cls(kind=str(data["kind"]), model=str(data["model"]), urls=tuple(data.get("urls") or ()),
                   engine=data.get("engine"), entry=data.get("entry"), fingerprints=dict(data.get("fingerprints") or {}),
                   reused=bool(data.get("reused")))


def _shown(url: str) -> str:
    return redact_url(url.rstrip("/")).removesuffix(" (credentials removed)")


def identity_of(config: RunConfig) -> EndpointIdentity | None:
    """The identity a run's config names (no request sent); None when it names neither an engine nor
    a URL (a backend handed in by a caller, as tests and scripts do)."""
    if config.engine is not None:
        return EndpointIdentity(kind="engine", model=config.model, engine={
            "engine": config.engine, "model": config.model, "model_fingerprint": config.model_fingerprint,
            "engine_options": dict(config.engine_options), "context_length": config.context_length})
    if config.base_url:
        return EndpointIdentity(kind="endpoint", model=config.model,
                                urls=tuple(sorted({_shown(u) for u in (config.base_url, *config.replicas)})))
    return None


def entry_of(entries: Sequence[Mapping[str, Any]], model: str) -> dict[str, Any] | None:
    """The describing fields of ``model``'s entry in a ``GET /v1/models`` list (None: not listed)."""
    for entry in entries:
        if entry.get("id") == model:
            return {k: entry[k] for k in ENTRY_FIELDS if entry.get(k) is not None}
    return None


def same(recorded: EndpointIdentity, current: EndpointIdentity) -> bool:
    """Whether ``current`` is the endpoint ``recorded`` describes: an engine by its settings; a server
    by a URL in common (a replica added or dropped is the same deployment) and, where both are known,
    the same ``/v1/models`` entry."""
    if recorded.kind != current.kind or recorded.model != current.model:
        return False
    if recorded.kind == "engine":
        if recorded.engine != current.engine:
            return False
    elif not set(recorded.urls) & set(current.urls):
        return False
    return recorded.entry is None or current.entry is None or dict(recorded.entry) == dict(current.entry)


def read(store: Any) -> list[EndpointIdentity]:
    """The identities recorded in a :class:`~evalpipe.store.answers.ResponseStore`."""
    return [EndpointIdentity.from_json(item) for item in store.read_meta(META_KEY) or []]


class OtherEndpoint(RunError):
    """The store's answers came from another endpoint than the one this run asks (one line)."""


def check(store: Any, current: EndpointIdentity, reuse: bool, notes: list[str]) -> None:
    """Record ``current`` as an endpoint of this store, or raise :class:`OtherEndpoint` when the store
    holds answers another endpoint gave (unless ``reuse``: then it is recorded as reused, and noted).

    Call it under the run directory's lock, before any request; again once the endpoint's
    ``/v1/models`` entry is known (``current.entry``).
    """
    recorded = read(store)
    match = next((i for i, r in enumerate(recorded) if same(r, current)), None)
    if match is not None:
        kept = recorded[match]
        recorded[match] = replace(kept, urls=tuple(sorted({*kept.urls, *current.urls})),
                                  entry=kept.entry if kept.entry is not None else current.entry)
        _write(store, recorded)
        return
    answers = len(store)
    if answers and recorded and not reuse:
        before = recorded[-1]
        raise OtherEndpoint(
            f"this run directory's {answers} stored answers came from {before.label()}; this run asks "
            f"{current.label()}, another endpoint whose answers may differ. Give the run a directory of its "
            "own (--run-name NAME or --results-dir DIR), or reuse the stored answers deliberately with "
            "--reuse-answers-from-other-endpoint (recorded in config.json)")
    if answers and recorded:
        notes.append(f"{answers} stored answers from {recorded[-1].label()} were reused for "
                     f"{current.label()} (--reuse-answers-from-other-endpoint)")
        current = replace(current, reused=True)
    elif answers:
        notes.append(f"the {answers} answers stored before were not identified by endpoint (a store written "
                     f"by an earlier evalpipe); they are taken as {current.label()}'s")
        recorded = []
    else:  # no answer stored: nothing to protect, the endpoint asked now is the store's
        recorded = []
    _write(store, [*recorded, current])


def add_fingerprints(store: Any, current: EndpointIdentity, seen: Mapping[str, int], notes: list[str]) -> None:
    """Count the ``system_fingerprint`` values this run's answers carried into ``current``'s record;
    a value not seen before beside earlier ones is noted (the provider changed its serving setup)."""
    if not seen:
        return
    recorded = read(store)
    for i, identity in enumerate(recorded):
        if same(identity, current):
            new = sorted(set(seen) - set(identity.fingerprints))
            if new and identity.fingerprints:
                notes.append(f"answers carry system_fingerprint {', '.join(new)}; earlier answers of this run "
                             f"carried {', '.join(sorted(identity.fingerprints))} (the provider changed its setup)")
            counts = dict(identity.fingerprints)
            for value, count in seen.items():
                counts[value] = counts.get(value, 0) + count
            recorded[i] = replace(identity, fingerprints=counts)
            _write(store, recorded)
            return


def fingerprints_in(stats: Mapping[str, Any]) -> dict[str, int]:
    """Every ``system_fingerprints`` count in a backend's stats (replicas nest theirs)."""
    found: dict[str, int] = {}

    def walk(node: Any) -> Iterator[Mapping[str, int]]:
        if isinstance(node, Mapping):
            for key, value in node.items():
                if key == "system_fingerprints" and isinstance(value, Mapping):
                    yield value
                else:
                    yield from walk(value)

    for counts in walk(stats):
        for value, count in counts.items():
            found[str(value)] = found.get(str(value), 0) + int(count)
    return found


def _write(store: Any, identities: Sequence[EndpointIdentity]) -> None:
    store.write_meta(META_KEY, [i.to_json() for i in identities])
