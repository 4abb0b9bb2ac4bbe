"""The response store's tables (SQLite), created where missing when a store is opened.

Kept apart from :mod:`evalpipe.store.answers` so the layout of the file can be read in one place.
"""

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
    endpoint TEXT,
    -- JSON: what only some answers have (cached/reasoning tokens, reasoning text, the batch); NULL = none
    extra TEXT
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
    -- '' since prompts are stored once in `prompts`; stores written before hold the prompt JSON here
    prompt TEXT NOT NULL,
    info TEXT NOT NULL DEFAULT '{}',
    PRIMARY KEY (task, sample_id)
);
CREATE TABLE IF NOT EXISTS prompts (
    key TEXT PRIMARY KEY,
    prompt TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS texts (
    key TEXT PRIMARY KEY,
    text TEXT NOT NULL
);
-- facts about the store as a whole, one JSON value each (key "endpoints": evalpipe.store.endpoint_identity)
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
"""
