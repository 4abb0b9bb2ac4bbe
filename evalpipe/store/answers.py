"""The response store: every answer is committed to SQLite the moment it arrives.

Why SQLite in WAL mode, each answer committed before the run counts it: a run killed with SIGKILL
at any moment loses at most the requests that were in flight, never an answer it had counted as
received, and a reader (``evalpipe score``) can open the store while a run is writing.
``synchronous=NORMAL`` in WAL mode keeps every committed row across a process crash (only an OS
crash or power loss can drop the last commits). Answers that arrive together share one
transaction (see "Commits" below).

Only successful answers are stored. A request that failed for good is not, so re-running the same
command sends exactly the failed and never-sent prompts again.

**The plan and the prompts.** The plan (table ``plan``) says which sample of which task (and prompt
condition) asked which key, in evaluation order, and how many tokens budgeting cut from it; it is
written before the first request, so ``evalpipe score`` works from the store alone. Each distinct
prompt is stored once (table ``prompts``, by its key), *packed*: the text it shares with the other
prompts of its plan — the few-shot prefix, the instructions — is kept once in table ``texts`` by its
sha256 and referenced (:mod:`evalpipe.store.prompt_pack`). 47,000 5-shot NCBI prompts take ~15 MB instead
of ~130 MB, and ``samples.jsonl`` names each sample's key instead of repeating its prompt
(:meth:`ResponseStore.prompts` gives them back). Stores written before (the whole prompt JSON in
``plan.prompt``) are read as they are.

**Commits.** :meth:`ResponseStore.put_many` commits many answers in one transaction; the runner
groups the answers that arrive together (:mod:`evalpipe.pipeline.answer_writer`) and counts an answer only
once its group is committed, so grouping never weakens "stored on arrival".

The same file keeps the replies of LLM judges (table ``judgements``, :mod:`evalpipe.judging`), one
committed row per reply, keyed by judge model, rubric sha256, task, sample, the judged answer's
sha256 and attempt — usable or not, so judging resumes without asking a judge twice.

The key (:mod:`evalpipe.store.keys`), the tables (:mod:`evalpipe.store.schema`), lossless text
(:mod:`evalpipe.store.db_text`) and judge replies (:mod:`evalpipe.store.judgements`) are modules of
their own.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from evalpipe.endpoints import redact_url
from evalpipe.errors import RunDirProblem
from evalpipe.records import Completion, Usage
from evalpipe.store.db_text import from_db_text, to_db_text
from evalpipe.store.judgements import StoredJudgement
from evalpipe.store.prompt_pack import referenced, unpack
from evalpipe.store.schema import SCHEMA


def _extra_json(completion: Completion) -> str | bytes | None:
    """The ``extra`` column of an answer: only what it has (NULL for a plain answer, as before)."""
    extra = {"cached_tokens": completion.usage.cached_tokens, "reasoning_tokens": completion.usage.reasoning_tokens,
             "reasoning": completion.reasoning, "batch_id": completion.batch_id}
    kept = {k: v for k, v in extra.items() if v is not None}
    return to_db_text(json.dumps(kept, ensure_ascii=False)) if kept else None


class StoreError(RunDirProblem):
    """The response store cannot be opened (a damaged file, another program's file)."""


class ResponseStore:
    """A SQLite file of answers keyed by :func:`cache_key`."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._open()
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path}: not a readable SQLite database ({exc}); it may be damaged — move it "
                             "away to start the run afresh (its answers would be asked again)") from None

    def _open(self) -> None:
        self._db = sqlite3.connect(str(self.path), isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA busy_timeout=10000")
        self._db.executescript(SCHEMA)
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(plan)")}
        if "info" not in columns:  # stores written before per-sample plan info existed
            self._db.execute("ALTER TABLE plan ADD COLUMN info TEXT NOT NULL DEFAULT '{}'")
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(responses)")}
        if "endpoint" not in columns:  # stores written before the answering endpoint was kept
            self._db.execute("ALTER TABLE responses ADD COLUMN endpoint TEXT")
        if "extra" not in columns:  # stores written before reasoning/cached tokens were kept (issue 25)
            self._db.execute("ALTER TABLE responses ADD COLUMN extra TEXT")

    _COLUMNS = "key, text, finish_reason, prompt_tokens, completion_tokens, latency_s, attempts, endpoint, extra"
    #: keys per SELECT … IN (…): well under SQLite's limit on bound parameters
    _CHUNK = 500

    def _rows_with_keys(self, select: str, keys: Sequence[str]) -> Iterator[tuple[Any, ...]]:
        """The rows of ``select`` (ending in ``WHERE key IN``) for ``keys``, chunk by chunk; each
        key asked once (``keys`` may repeat)."""
        unique = list(dict.fromkeys(keys))
        for start in range(0, len(unique), self._CHUNK):
            chunk = unique[start:start + self._CHUNK]
            yield from self._db.execute(f"{select} ({','.join('?' * len(chunk))})", chunk)

    @staticmethod
    def _completion(row: tuple[Any, ...]) -> Completion:
        _, text, finish, p_tok, c_tok, latency, attempts, endpoint, extra = row
        more = json.loads(from_db_text(extra)) if extra else {}
        return Completion(
            text=from_db_text(text),
            finish_reason=from_db_text(finish),
            usage=Usage(p_tok, c_tok, more.get("cached_tokens"), more.get("reasoning_tokens")),
            latency_s=latency or 0.0,
            attempts=attempts or 1,
            endpoint_url=from_db_text(endpoint),
            reasoning=more.get("reasoning"),
            batch_id=more.get("batch_id"),
        )

    def get(self, key: str) -> Completion | None:
        row = self._db.execute(f"SELECT {self._COLUMNS} FROM responses WHERE key = ?", (key,)).fetchone()
        return None if row is None else self._completion(row)

    def get_many(self, keys: list[str]) -> dict[str, Completion]:
        """The stored answers among ``keys`` (absent keys are left out), in chunked SELECTs."""
        return {row[0]: self._completion(row)
                for row in self._rows_with_keys(f"SELECT {self._COLUMNS} FROM responses WHERE key IN", keys)}

    def put(self, key: str, model: str, completion: Completion) -> None:
        """Store one successful answer in its own committed transaction (see :meth:`put_many`)."""
        self.put_many(model, [(key, completion)])

    def put_many(self, model: str, items: Sequence[tuple[str, Completion]]) -> None:
        """Store successful answers in one committed transaction: when this returns, all are durable.

        The endpoint that answered is kept without credentials (``redact_url``), so a sample can
        be traced to the replica that served it. Text UTF-8 cannot encode (a lone surrogate) is
        stored losslessly as bytes (see the module docstring), never refused.
        """
        if any(not completion.ok for _, completion in items):
            raise ValueError("only successful completions are stored")
        now = time.time()
        stored_model = to_db_text(model)
        rows = [(
            key,
            stored_model,
            to_db_text(completion.text),
            to_db_text(completion.finish_reason),
            completion.usage.prompt_tokens,
            completion.usage.completion_tokens,
            completion.latency_s,
            completion.attempts,
            now,
            to_db_text(redact_url(completion.endpoint_url)) if completion.endpoint_url else None,
            _extra_json(completion),
        ) for key, completion in items]
        with self._db:
            self._db.execute("BEGIN")
            self._db.executemany(
                "INSERT OR REPLACE INTO responses (key, model, text, finish_reason, prompt_tokens,"
                " completion_tokens, latency_s, attempts, created, endpoint, extra)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                rows,
            )

    @contextlib.contextmanager
    def checkpoints_deferred(self) -> Iterator[None]:
        """No WAL checkpoint inside the block, one at its end.

        SQLite copies the write-ahead log into the database file every 1,000 pages, inside
        whichever commit crosses the mark: measured, 7–9 ms every ~6,000 NCBI answers, against
        ~0.6 ms for a commit of 126 answers — and commits run on the event loop between requests.
        The log only grows meanwhile (~1 KB an answer); a commit is exactly as durable (it is in
        the log), and a killed run's log is replayed when the store is opened again.
        """
        previous = int(self._db.execute("PRAGMA wal_autocheckpoint").fetchone()[0])
        self._db.execute("PRAGMA wal_autocheckpoint=0")
        try:
            yield
        finally:
            self._db.execute(f"PRAGMA wal_autocheckpoint={previous}")
            self._db.execute("PRAGMA wal_checkpoint(PASSIVE)")

    def write_staged_plan(self, task: str, stage: Path, staged: str, texts: Mapping[str, str]) -> None:
        """Record the plan of ``task`` from plan ``staged`` of a :class:`~evalpipe.pipeline.stage.PlanStage`
        file (rows ``plan, position, sample_id, key, packed, info``), replacing an older plan, with
        each key's prompt (a key whose prompt the store holds already keeps it) and the shared
        ``texts`` of the prompts' packer. No sample is ever in Python: SQLite copies the rows across
        the attached file (47,000 samples without 47,000 tuples).

        Written before the first request, in one transaction (plan, prompts, shared texts), so a run
        directory can be re-scored later from the store alone — even if it was killed, and even if
        the template has changed since. A resumed run usually has the very same plan: then nothing is
        written (compared in SQL; the key is a hash of the prompt, so equal ids, keys and infos mean
        equal rows).
        """
        self._db.execute("ATTACH DATABASE ? AS stage", (str(stage),))
        try:
            same = self._db.execute(
                "SELECT COUNT(*) FROM plan p JOIN stage.rows s ON s.plan = ? AND s.position = p.position "
                "WHERE p.task = ? AND p.sample_id IS s.sample_id AND p.key = s.key AND p.info = s.info",
                (staged, task)).fetchone()[0]
            size = self._db.execute("SELECT COUNT(*) FROM stage.rows WHERE plan = ?", (staged,)).fetchone()[0]
            if same == size == self.plan_size(task):
                return
            with self._db:
                self._db.execute("BEGIN")
                self._db.execute("DELETE FROM plan WHERE task = ?", (task,))
                self._db.execute("INSERT INTO plan (task, sample_id, position, key, prompt, info) "
                                 "SELECT ?, sample_id, position, key, '', info FROM stage.rows WHERE plan = ? "
                                 "ORDER BY position", (task, staged))
                self._db.execute("INSERT OR IGNORE INTO prompts (key, prompt) "
                                 "SELECT key, packed FROM stage.rows WHERE plan = ? ORDER BY position", (staged,))
                self._db.executemany("INSERT OR IGNORE INTO texts (key, text) VALUES (?, ?)",
                                     [(key, to_db_text(text)) for key, text in texts.items()])
        finally:
            self._db.execute("DETACH DATABASE stage")

    def plan_pages(self, task: str, size: int = 1024) -> Iterator[list[tuple[str, str, dict[str, Any]]]]:
        """The recorded plan of ``task`` as :meth:`read_plan` gives it, a page of ``size`` rows at a
        time (each page one short query: no statement stays open between pages)."""
        after = -1
        while True:
            page = self._db.execute("SELECT position, sample_id, key, info FROM plan WHERE task = ? AND position > ? "
                                    "ORDER BY position LIMIT ?", (task, after, size)).fetchall()
            if not page:
                return
            yield [(from_db_text(sid), key, json.loads(info)) for _, sid, key, info in page]
            after = page[-1][0]

    def distinct_keys(self, tasks: Sequence[str]) -> int:
        """How many distinct keys the plans of ``tasks`` ask."""
        marks = ",".join("?" * len(tasks))
        return int(self._db.execute(f"SELECT COUNT(DISTINCT key) FROM plan WHERE task IN ({marks})",
                                    list(tasks)).fetchone()[0])

    def has_answers(self) -> bool:
        """Whether the store holds any answer at all (a fresh run's holds none)."""
        return bool(self._db.execute("SELECT EXISTS (SELECT 1 FROM responses)").fetchone()[0])

    def unanswered(self, task: str) -> int:
        """How many samples of the plan of ``task`` have no stored answer."""
        return int(self._db.execute("SELECT COUNT(*) FROM plan p WHERE p.task = ? AND NOT EXISTS "
                                    "(SELECT 1 FROM responses r WHERE r.key = p.key)", (task,)).fetchone()[0])

    def queue_pending(self, name: str, tasks: Sequence[str], exclude: Sequence[str] = ()) -> int:
        """Queue (in temporary table ``name``) every key the plans of ``tasks`` ask that has no stored
        answer — each once, in plan order (``tasks`` in order, then position) — and say how many.

        The queue lives in SQLite's temporary storage, not in Python: a run of 47,000 samples
        holds no list of what it still has to send; :meth:`pending_pages` reads it back in pages.
        A key already in one of the queues ``exclude`` is left out (it is sent once, by that queue).
        """
        self._db.execute(f"DROP TABLE IF EXISTS temp.{name}")
        self._db.execute(f"CREATE TEMP TABLE {name} (key TEXT PRIMARY KEY)")
        for task in tasks:
            others = "".join(f" AND NOT EXISTS (SELECT 1 FROM temp.{q} e WHERE e.key = p.key)" for q in exclude)
            self._db.execute(f"INSERT OR IGNORE INTO temp.{name} (key) SELECT p.key FROM plan p WHERE p.task = ? "
                             f"AND NOT EXISTS (SELECT 1 FROM responses r WHERE r.key = p.key){others} "
                             "ORDER BY p.position", (task,))
        return int(self._db.execute(f"SELECT COUNT(*) FROM temp.{name}").fetchone()[0])

    def pending_pages(self, name: str, size: int = 512) -> Iterator[list[tuple[str, str]]]:
        """The queue ``name`` (:meth:`queue_pending`) as pages of ``(key, packed prompt JSON)``, in
        queue order (a packed prompt references shared texts: its packer's, also in table ``texts``)."""
        after = 0
        while True:
            page = self._db.execute(
                f"SELECT q.rowid, q.key, p.prompt FROM temp.{name} q JOIN prompts p ON p.key = q.key "
                "WHERE q.rowid > ? ORDER BY q.rowid LIMIT ?", (after, size)).fetchall()
            if not page:
                return
            yield [(key, from_db_text(prompt)) for _, key, prompt in page]
            after = page[-1][0]

    def plan_size(self, task: str) -> int:
        """How many samples the recorded plan of ``task`` has."""
        return int(self._db.execute("SELECT COUNT(*) FROM plan WHERE task = ?", (task,)).fetchone()[0])

    def read_plan(self, task: str) -> list[tuple[str, str, dict[str, Any]]]:
        """(sample id, key, info) in evaluation order; info holds e.g. ``truncated_tokens``."""
        rows = self._db.execute("SELECT sample_id, key, info FROM plan WHERE task = ? ORDER BY position", (task,))
        return [(from_db_text(sid), key, json.loads(info)) for sid, key, info in rows]

    def prompts(self, keys: Sequence[str]) -> dict[str, Any]:
        """The JSON form of the prompt of each of ``keys`` that the store holds (absent ones left out).

        Prompts are unpacked (shared texts joined back in); a store written before prompts were
        kept once has them in its plan, and they are read from there.
        """
        unique = list(dict.fromkeys(keys))
        packed = {key: json.loads(from_db_text(prompt))
                  for key, prompt in self._rows_with_keys("SELECT key, prompt FROM prompts WHERE key IN", unique)}
        shared = self._texts(set().union(*(referenced(p) for p in packed.values())) if packed else set())
        found = {key: unpack(prompt, shared) for key, prompt in packed.items()}
        missing = {k for k in unique if k not in found}
        if missing:  # a store written before `prompts` existed: the prompt JSON is in the plan
            for key, prompt in self._db.execute("SELECT key, prompt FROM plan WHERE prompt != ''"):
                if key in missing and key not in found:
                    found[key] = json.loads(from_db_text(prompt))
        return found

    def _texts(self, keys: set[str]) -> dict[str, str]:
        return {k: from_db_text(t) for k, t in self._rows_with_keys("SELECT key, text FROM texts WHERE key IN", list(keys))}

    def get_vectors(self, keys: list[str]) -> dict[str, bytes]:
        """Stored embedding vectors (float32 bytes) among ``keys`` (retrieval tasks' candidate pools)."""
        return {key: bytes(data) for key, data in self._rows_with_keys("SELECT key, data FROM vectors WHERE key IN", keys)}

    def put_vectors(self, model: str, items: list[tuple[str, bytes]]) -> None:
        """Store embedding vectors in one committed transaction: a killed run does not embed them again."""
        with self._db:
            self._db.execute("BEGIN")
            self._db.executemany("INSERT OR REPLACE INTO vectors (key, model, data) VALUES (?, ?, ?)",
                                 [(key, model, data) for key, data in items])

    # ---- judgements (evalpipe.judging): one row per judge reply, committed on arrival -----------

    _JUDGEMENT_COLUMNS = ("judge, rubric_sha256, task, sample_id, answer_sha256, attempt, request_key, text, ratings,"
                          " problem, prompt_tokens, completion_tokens, latency_s, endpoint")

    def put_judgement(self, row: StoredJudgement) -> None:
        """Store one judge reply (usable or not) in its own committed transaction.

        Keyed by judge model, rubric sha256, task, sample, the judged answer's sha256 and the
        attempt (1, or 2 for the one retry of an unusable reply): an interrupted judging resumes
        without asking a judge twice. ``request_key`` is the hash of the request as sent; a reply
        whose request differs from the one that would be sent now is not reused by the judge run.
        """
        self._db.execute(
            f"INSERT OR REPLACE INTO judgements ({self._JUDGEMENT_COLUMNS}, created)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (to_db_text(row.judge), row.rubric_sha256, row.task, to_db_text(row.sample_id), row.answer_sha256,
             row.attempt, row.request_key, to_db_text(row.text),
             json.dumps(dict(row.ratings)) if row.ratings is not None else None,
             to_db_text(row.problem), row.prompt_tokens, row.completion_tokens, row.latency_s,
             redact_url(row.endpoint) if row.endpoint else None, time.time()),
        )

    def judgements(self, task: str, judges: list[str] | None = None,
                   rubric_sha256: str | None = None) -> list[StoredJudgement]:
        """Every stored judge reply of ``task`` (optionally of some judges and one rubric)."""
        query = f"SELECT {self._JUDGEMENT_COLUMNS} FROM judgements WHERE task = ?"
        args: list[object] = [task]
        if rubric_sha256 is not None:
            query += " AND rubric_sha256 = ?"
            args.append(rubric_sha256)
        rows = self._db.execute(query + " ORDER BY sample_id, judge, attempt", args).fetchall()
        wanted = set(judges) if judges is not None else None
        # a judge's reply may hold a lone surrogate, as a model's answer may: stored as bytes, read back whole
        return [StoredJudgement(
            judge=from_db_text(judge), rubric_sha256=rubric, task=name, sample_id=from_db_text(sid),
            answer_sha256=answer, attempt=attempt, request_key=request_key, text=from_db_text(text),
            ratings=json.loads(ratings) if ratings is not None else None, problem=from_db_text(problem),
            prompt_tokens=p_tok, completion_tokens=c_tok, latency_s=latency or 0.0, endpoint=endpoint,
        ) for (judge, rubric, name, sid, answer, attempt, request_key, text, ratings, problem, p_tok, c_tok,
               latency, endpoint) in rows if wanted is None or from_db_text(judge) in wanted]

    def __len__(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM responses").fetchone()[0])

    def read_meta(self, key: str) -> Any:
        """The JSON value stored under ``key`` in table ``meta`` (None when there is none)."""
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else None

    def write_meta(self, key: str, value: Any) -> None:
        """Store ``value`` (JSON) under ``key``, committed at once."""
        self._db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, json.dumps(value)))

    def close(self) -> None:
        self._db.close()
