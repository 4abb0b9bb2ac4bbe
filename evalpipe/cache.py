"""The response store: every answer is committed to SQLite the moment it arrives.

Why SQLite in WAL mode with one transaction per answer: a run killed with SIGKILL at any moment
loses at most the requests that were in flight, never an answer that was already received, and a
reader (``evalpipe score``) can open the store while a run is writing. ``synchronous=NORMAL`` in
WAL mode keeps every committed row across a process crash (only an OS crash or power loss can
drop the last commits), at a cost of tens of microseconds per answer.

Only successful answers are stored. A request that failed for good is not, so re-running the same
command sends exactly the failed and never-sent prompts again.

The key is a SHA-256 over everything that can change an answer — model, endpoint kind, rendered
messages or prompt text, generation parameters — and nothing that cannot (the URL of the server:
a restarted server on another port must not invalidate finished work).

The same file keeps the replies of LLM judges (table ``judgements``, :mod:`evalpipe.judging`), one
committed row per reply, keyed by judge model, rubric sha256, task, sample, the judged answer's
sha256 and attempt — usable or not, so judging resumes without asking a judge twice.

Text that UTF-8 cannot encode is stored losslessly. A JSON answer may carry a lone surrogate
(``"\\udcff"`` is valid JSON, and ``json.loads`` gives a Python string holding U+DCFF); SQLite's
driver refuses such a string, and one refused answer would stop every re-run at the same place.
So a string that does not encode is stored as a BLOB of its ``surrogatepass`` UTF-8 bytes in the
same column (SQLite keeps a BLOB as it is in a TEXT column; no schema change), and every read
decodes a BLOB back to the very same string (:func:`to_db_text`, :func:`from_db_text`). Ordinary
text keeps the TEXT storage class, byte for byte as before.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from evalpipe.endpoints import redact_url
from evalpipe.records import Completion, Prompt, Usage, to_jsonable

SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    text TEXT NOT NULL,
    finish_reason TEXT,
    prompt_tokens INTEGER,
    completion_tokens INTEGER,
    latency_s REAL,
    attempts INTEGER,
    created REAL NOT NULL,
    endpoint TEXT
);
CREATE TABLE IF NOT EXISTS vectors (
    key TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    data BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS judgements (
    judge TEXT NOT NULL,
    rubric_sha256 TEXT NOT NULL,
    task TEXT NOT NULL,
    sample_id TEXT NOT NULL,
    answer_sha256 TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    request_key TEXT NOT NULL,
    text TEXT NOT NULL,
    ratings TEXT,
    problem TEXT,
    prompt_tokens INTEGER,
    completion_tokens INTEGER,
    latency_s REAL,
    created REAL NOT NULL,
    endpoint TEXT,
    PRIMARY KEY (judge, rubric_sha256, task, sample_id, answer_sha256, attempt)
);
CREATE TABLE IF NOT EXISTS plan (
    task TEXT NOT NULL,
    sample_id TEXT NOT NULL,
    position INTEGER NOT NULL,
    key TEXT NOT NULL,
    prompt TEXT NOT NULL,
    info TEXT NOT NULL DEFAULT '{}',
    PRIMARY KEY (task, sample_id)
);
"""


def to_db_text(value: str | None) -> str | bytes | None:
    """``value`` as SQLite can store it: itself, or (when UTF-8 cannot encode it) its bytes.

    The bytes are UTF-8 with lone surrogates written as their three-byte forms
    (``surrogatepass``), so :func:`from_db_text` gives back exactly ``value``.
    """
    if value is None:
        return None
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return value.encode("utf-8", "surrogatepass")
    return value


def from_db_text(value: str | bytes | None) -> str | None:
    """The string :func:`to_db_text` stored (a BLOB is decoded with ``surrogatepass``)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogatepass")
    return value


@dataclass(frozen=True)
class StoredJudgement:
    """One judge reply as the store keeps it (see :meth:`ResponseStore.put_judgement`).

    ``ratings`` is criterion → rating when the reply was usable, else None and ``problem`` says why.
    """

    judge: str
    rubric_sha256: str
    task: str
    sample_id: str
    answer_sha256: str
    attempt: int
    request_key: str
    text: str
    ratings: Mapping[str, int] | None
    problem: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_s: float = 0.0
    endpoint: str | None = None


def cache_key(model: str, prompt: Prompt) -> str:
    payload = {
        "model": model,
        "endpoint": prompt.endpoint,
        "messages": to_jsonable(prompt.messages) if prompt.messages is not None else None,
        "text": prompt.text,
        "params": to_jsonable(asdict(prompt.params)),
    }
    if prompt.choices is not None:  # only then: keys of prompts without choices stay as they were
        payload["choices"] = list(prompt.choices)
    blob = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    # surrogatepass: a prompt holding a lone surrogate gets a key too; other text encodes as before
    return hashlib.sha256(blob.encode("utf-8", "surrogatepass")).hexdigest()


class StoreError(RuntimeError):
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

    _COLUMNS = "key, text, finish_reason, prompt_tokens, completion_tokens, latency_s, attempts, endpoint"
    #: keys per SELECT … IN (…): well under SQLite's limit on bound parameters
    _CHUNK = 500

    @staticmethod
    def _completion(row: tuple) -> Completion:
        _, text, finish, p_tok, c_tok, latency, attempts, endpoint = row
        return Completion(
            text=from_db_text(text),
            finish_reason=from_db_text(finish),
            usage=Usage(p_tok, c_tok),
            latency_s=latency or 0.0,
            attempts=attempts or 1,
            endpoint_url=from_db_text(endpoint),
        )

    def get(self, key: str) -> Completion | None:
        row = self._db.execute(f"SELECT {self._COLUMNS} FROM responses WHERE key = ?", (key,)).fetchone()
        return None if row is None else self._completion(row)

    def get_many(self, keys: list[str]) -> dict[str, Completion]:
        """The stored answers among ``keys`` (absent keys are left out), in chunked SELECTs."""
        unique = list(dict.fromkeys(keys))
        found: dict[str, Completion] = {}
        for start in range(0, len(unique), self._CHUNK):
            chunk = unique[start:start + self._CHUNK]
            marks = ",".join("?" * len(chunk))
            for row in self._db.execute(f"SELECT {self._COLUMNS} FROM responses WHERE key IN ({marks})", chunk):
                found[row[0]] = self._completion(row)
        return found

    def put(self, key: str, model: str, completion: Completion) -> None:
        """Store a successful answer in its own committed transaction.

        The endpoint that answered is kept without credentials (``redact_url``), so a sample can
        be traced to the replica that served it. Text UTF-8 cannot encode (a lone surrogate) is
        stored losslessly as bytes (see the module docstring), never refused.
        """
        if not completion.ok:
            raise ValueError("only successful completions are stored")
        self._db.execute(
            "INSERT OR REPLACE INTO responses (key, model, text, finish_reason, prompt_tokens,"
            " completion_tokens, latency_s, attempts, created, endpoint) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                key,
                to_db_text(model),
                to_db_text(completion.text),
                to_db_text(completion.finish_reason),
                completion.usage.prompt_tokens,
                completion.usage.completion_tokens,
                completion.latency_s,
                completion.attempts,
                time.time(),
                to_db_text(redact_url(completion.endpoint_url)) if completion.endpoint_url else None,
            ),
        )

    def write_plan(self, task: str, rows: list[tuple[str, str, str]], infos: list[dict] | None = None) -> None:
        """Record which prompt (and key) each sample of ``task`` uses, replacing an older plan.

        Written before the first request, so a run directory can be re-scored later from the
        store alone — even if it was killed, and even if the template has changed since. A resumed
        run usually has the very same plan: then nothing is written (the key is a hash of the
        prompt, so equal ids, keys and infos mean equal rows — LongHealth's prompts are tens of MB).
        """
        infos = infos or [{} for _ in rows]
        wanted = [(sid, key, json.dumps(info)) for (sid, key, _), info in zip(rows, infos)]
        recorded = [(from_db_text(sid), key, info) for sid, key, info in self._db.execute(
            "SELECT sample_id, key, info FROM plan WHERE task = ? ORDER BY position", (task,))]
        if recorded == wanted:
            return
        with self._db:
            self._db.execute("BEGIN")
            self._db.execute("DELETE FROM plan WHERE task = ?", (task,))
            self._db.executemany(
                "INSERT INTO plan VALUES (?, ?, ?, ?, ?, ?)",
                [(task, to_db_text(sid), i, key, to_db_text(prompt), info_json)
                 for i, ((sid, key, prompt), (_, _, info_json)) in enumerate(zip(rows, wanted))],
            )

    def plan_size(self, task: str) -> int:
        """How many samples the recorded plan of ``task`` has (without reading its prompts)."""
        return int(self._db.execute("SELECT COUNT(*) FROM plan WHERE task = ?", (task,)).fetchone()[0])

    def read_plan(self, task: str) -> list[tuple[str, str, str, dict]]:
        """(sample id, key, prompt JSON, info) in evaluation order; info holds e.g. truncated_tokens."""
        rows = self._db.execute(
            "SELECT sample_id, key, prompt, info FROM plan WHERE task = ? ORDER BY position", (task,)
        )
        return [(from_db_text(sid), key, from_db_text(prompt), json.loads(info)) for sid, key, prompt, info in rows]

    def get_vectors(self, keys: list[str]) -> dict[str, bytes]:
        """Stored embedding vectors (float32 bytes) among ``keys`` (retrieval tasks' candidate pools)."""
        unique = list(dict.fromkeys(keys))
        found: dict[str, bytes] = {}
        for start in range(0, len(unique), self._CHUNK):
            chunk = unique[start:start + self._CHUNK]
            marks = ",".join("?" * len(chunk))
            for key, data in self._db.execute(f"SELECT key, data FROM vectors WHERE key IN ({marks})", chunk):
                found[key] = bytes(data)
        return found

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

    def close(self) -> None:
        self._db.close()
