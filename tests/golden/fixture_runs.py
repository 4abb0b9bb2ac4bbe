"""Deterministic fixture runs of every registered task, for the golden-metrics safety net.

A refactor must never change a user's numbers. This module produces, from fixture data only and
without any model or network, one run per group of tasks (the CLUE and CBLUE suites as suites, so
their aggregates are in ``metrics.json``), re-scores every run in each compatibility mode its
tasks have, and collects what a user would see: ``metrics.json``, ``metrics.<compat>.json`` and a
digest of every rendered prompt (``prompts.sha256.json``). ``tests/golden/test_golden.py``
compares those bytes with the files committed under ``tests/golden/expected/``.

The scripted model is deterministic (zlib.crc32 of the prompt, never ``hash()``) and realistic:
it finds which example a prompt is about by the example's own input text in the last user message,
then answers, by a bucket of the crc32, the task's gold answer (``spec.shot_target``) about half of
the time, else a perturbed gold answer (an item dropped or altered, text cut short), another
example's gold (a wrong label), the gold wrapped in chatty prose, a refusal, an empty answer, or a
failed request.

It uses as little of evalpipe's internals as it can — ``pipeline.execute.execute``, ``rescoring.rescore``,
the registry and ``TaskSpec.load``/``shot_target`` — so a refactor of the core touches little here.

Regenerate the golden files (only for an intentional, documented change; see README.md)::

    python -m tests.golden.fixture_runs --write
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from evalpipe.config import RunConfig
from evalpipe.metrics import concepts
from evalpipe.records import Example, Prompt
from evalpipe.rescoring import rescore
from evalpipe.results import RunDir
from evalpipe.pipeline.execute import execute
from evalpipe.tasks.base import LoadOptions
from evalpipe.tasks.registry import get_task, suites
from tests.cblue import synthetic as syn
from tests.clue.conftest import FIXTURES as CLUE_FIXTURES
from tests.clue.conftest import FakeExtractor
from tests.support.scripted_backend import ScriptedBackend
from tests.tasks import mcqa_synthetic

EXPECTED = Path(__file__).parent / "expected"
MODEL = "golden-scripted"
#: the fake UMLS extractor (tests/clue/conftest.py) under its own name, so no other test's
#: set-up or tear-down of "fake" touches it; its metric keys still read ``umls[fake]_*``
UMLS_EXTRACTOR = "golden-fake"
#: bert-score de-duplicates the texts it embeds through a ``set`` and batches them in that order
#: (among texts of equal word count), so with more than one batch of texts (MeQSum here) its
#: numbers move by ~1e-9 with Python's hash seed: the fixture runs are made with this one
HASH_SEED = "0"
#: a context in which LongHealth leaves out letters (10 of 25 samples of task 1, all of tasks 2 and 3)
CLUE_CONTEXT_LENGTH = 1100
#: a context (with max_tokens 64) in which the fixtures' long clinical fields are shortened to fit
BUDGETED_CONTEXT_LENGTH = 400


# ---- the fixture runs ------------------------------------------------------------------------

@dataclass(frozen=True)
class FixtureRun:
    """One run of :func:`fixture_runs`: its name (= its folder under ``expected/``) and configuration."""

    name: str
    config: RunConfig
    #: compatibility scorings to re-score in (every non-default scoring all its tasks have)
    compats: tuple[str, ...] = ()


def write_fixture_data(root: Path) -> dict[str, Path]:
    """The synthetic CBLUE, PromptCBLUE and Huatuo-26M files (tests/cblue/synthetic.py) under ``root``."""
    return {
        "cblue": syn.write_cblue(root / "CBLUEDatasets"),
        "cdn_terms": syn.write_term_table(root / "cdn_terms.xlsx"),
        "promptcblue": syn.write_promptcblue(root / "PromptCBLUE" / "dev.json"),
        "huatuo": syn.write_huatuo(root / "Huatuo26M" / "test_datasets.jsonl"),
        "mcqa": mcqa_synthetic.write_all(root / "mcqa"),
    }


def fixture_runs(data: Mapping[str, Path]) -> list[FixtureRun]:
    """Every registered task, in eight runs."""
    known = suites()

    def run(name: str, tasks: tuple[str, ...], **options: Any) -> FixtureRun:
        config = RunConfig(tasks=tasks, model=MODEL, run_name=name, **options)
        compats = set.intersection(*(set(get_task(t).scorings) for t in tasks)) - {"default"}
        return FixtureRun(name, config, tuple(sorted(compats)))

    clue_suites = ("clue", "clue-level1", "clue-level2")
    return [
        run("ncbi_disease", ("ncbi_disease",), limit=60),
        # limit 30 cuts MeQSum (shipped, ~1000 questions); the CLUE fixtures are smaller than that
        run("clue", known["clue"].tasks, suites=clue_suites, data_dir=str(CLUE_FIXTURES), limit=30,
            context_length=CLUE_CONTEXT_LENGTH, metric_options={"umls_extractor": UMLS_EXTRACTOR}),
        run("clue_budgeted", ("clue_medisumqa", "clue_problem_summaries"), data_dir=str(CLUE_FIXTURES),
            context_length=BUDGETED_CONTEXT_LENGTH, max_tokens=64, metric_options={"umls_extractor": UMLS_EXTRACTOR}),
        run("cblue", known["cblue"].tasks, suites=("cblue",), data_dir=str(data["cblue"]),
            data={"chip_cdn:cdn_terms": str(data["cdn_terms"])}),
        run("promptcblue", ("promptcblue",), data={"promptcblue": str(data["promptcblue"])}),
        run("huatuo_generation", ("huatuo_generation",), data={"huatuo_generation": str(data["huatuo"])}),
        # answered by an embedding ranker (HashedBigramEmbedder), not the scripted model
        run("huatuo_retrieval", ("huatuo_retrieval",), data={"huatuo_retrieval": str(data["huatuo"])},
            embeddings_url="http://127.0.0.1:1/v1", embeddings_model=HashedBigramEmbedder.model),
        # the multiple-choice benchmarks (task files only), MMLU's medical subjects as their suite
        run("mcqa", ("medqa", "medmcqa", "pubmedqa", *known["mmlu_medical"].tasks), suites=("mmlu_medical",),
            data_dir=str(data["mcqa"])),
    ]


def load_options(config: RunConfig, task: str) -> LoadOptions:
    """The data options a task of ``config`` is loaded with (what ``--data``/``--data-dir`` say)."""
    paths = {}
    for key, path in config.data.items():
        name, _, role = key.partition(":")
        if name == task:
            paths[role or "eval"] = Path(path)
    return LoadOptions(split=config.split, paths=paths, data_dir=Path(config.data_dir) if config.data_dir else None,
                       seed=config.seed or 0, context_length=config.context_length)


# ---- the scripted model ----------------------------------------------------------------------

REFUSAL = "I'm sorry, but I can't help with medical questions. Please consult a doctor."


def _leaves(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _leaves(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _leaves(item)


def signature(example: Example) -> tuple[str, ...]:
    """The example's input texts as they would appear in a prompt: the start of each (a long field
    may be cut from its end to fit the context), without one-letter labels that match anything."""
    texts = {leaf.strip()[:120] for leaf in _leaves(example.inputs)}
    return tuple(sorted(t for t in texts if len(t) >= 2))


def prompt_text(prompt: Prompt) -> str:
    if prompt.messages is not None:
        return "\n".join(f"{m.role}: {m.content}" for m in prompt.messages)
    return prompt.text or ""


def last_user_message(prompt: Prompt | Mapping[str, Any]) -> str:
    """Of a prompt, or of its JSON form in ``samples.jsonl``."""
    if isinstance(prompt, Mapping):
        messages = [m["content"] for m in prompt.get("messages") or () if m["role"] == "user"]
        return messages[-1] if messages else prompt.get("text") or ""
    if prompt.messages is not None:
        return [m.content for m in prompt.messages if m.role == "user"][-1]
    return prompt.text or ""


@dataclass(frozen=True)
class Candidate:
    task: str
    index: int
    signature: tuple[str, ...]
    gold: str
    #: the gold answer of the next example of the same task (a wrong answer of the right form)
    other_gold: str


def candidates(config: RunConfig) -> list[Candidate]:
    out = []
    for task in config.tasks:
        spec = get_task(task)
        examples = spec.load(load_options(config, task)).materialized().examples[: config.limit]
        golds = [spec.shot_target(ex) for ex in examples]
        for i, ex in enumerate(examples):
            out.append(Candidate(task, i, signature(ex), golds[i], golds[(i + 1) % len(golds)]))
    return out


def identify(text: str, pool: list[Candidate]) -> Candidate:
    """The example with the largest share of its input texts in the last user message (a field
    the template does not show is simply not found; shots bring other words along), and of those
    the one that accounts for the most text (the three LongHealth tasks ask the same questions)."""

    def fit(c: Candidate) -> tuple[float, int]:
        found = sum(len(s) for s in c.signature if s in text)
        return found / max(1, sum(map(len, c.signature))), found

    best = max(map(fit, pool))
    top = [c for c in pool if fit(c) == best]
    if best[1] == 0 or len({c.gold for c in top}) > 1:
        raise LookupError(f"cannot tell which example this prompt is about ({[(c.task, c.index) for c in top][:5]}): "
                          f"{text[-300:]!r}")
    return top[0]


def drop_item(answer: str) -> str:
    """One predicted item fewer: an inner XML tag unwrapped, or the last of a list's items dropped."""
    tagged = re.sub(r"<(?!response>)(\w+)>(.*?)</\1>", r"\2", answer, count=1, flags=re.S)
    if tagged != answer:
        return tagged
    for sep in ("##", "\n", "；", "，", ", ", "、"):
        if sep in answer.strip():
            return answer.strip().rsplit(sep, 1)[0]
    return truncate(answer)


def alter_item(answer: str) -> str:
    """A boundary or spelling error: an inner closing tag moved one character on, else the last
    letter or digit changed (a code, a term or a label that is no longer the gold one)."""
    moved = re.sub(r"</(?!response>)(\w+)>([^<])", r"\2</\1>", answer, count=1)
    if moved != answer:
        return moved
    for i in range(len(answer) - 1, -1, -1):
        char = answer[i]
        if char.isalnum():
            altered = "0" if char == "9" else "a" if char in "zZ" else chr(ord(char) + 1)
            return answer[:i] + altered + answer[i + 1:]
    return answer


def truncate(answer: str) -> str:
    return answer[: max(1, len(answer) // 2)]


#: crc32(prompt) % 20 → the answer given; 10 of 20 buckets are the gold answer
ANSWERS: dict[int, Callable[[Candidate], str | Exception]] = {
    **{b: (lambda c: c.gold) for b in range(10)},
    10: lambda c: drop_item(c.gold),
    11: lambda c: drop_item(c.gold),
    12: lambda c: alter_item(c.gold),
    13: lambda c: truncate(c.gold),
    14: lambda c: c.other_gold,
    15: lambda c: c.other_gold,
    16: lambda c: f"Sure! Based on the text, here is my answer:\n\n{c.gold}\n\nLet me know if you need more.",
    17: lambda c: REFUSAL,
    18: lambda c: "",
    19: lambda c: RuntimeError("HTTP 500 Internal Server Error after 3 attempts"),
}


def responder(pool: list[Candidate]) -> Callable[[Prompt], str | Exception]:
    def respond(prompt: Prompt) -> str | Exception:
        bucket = zlib.crc32(prompt_text(prompt).encode("utf-8")) % len(ANSWERS)
        return ANSWERS[bucket](identify(last_user_message(prompt), pool))

    return respond


def check_identified(run_dir: Path, pool: list[Candidate]) -> None:
    """Every sample was answered about itself (or about an example with the very same inputs and
    answer, as LongHealth's repeats in another document order): the model told the examples apart."""
    own = {(c.task, c.index): c for c in pool}
    position: dict[str, int] = {}
    for sample in RunDir(run_dir).read_samples(prompts=True):
        index = position[sample["task"]] = position.get(sample["task"], -1) + 1
        found = identify(last_user_message(sample["prompt"]), pool)
        expected = own[sample["task"], index]
        if (found.task, found.signature, found.gold) != (expected.task, expected.signature, expected.gold):
            raise AssertionError(f"{run_dir.name}: sample {sample['task']}/{sample['id']} was answered as "
                                 f"{found.task} example {found.index}")


# ---- Huatuo retrieval ------------------------------------------------------------------------

class HashedBigramEmbedder:
    """A deterministic stand-in for an embedding model: character bigrams hashed (crc32) into 64
    dimensions, so questions and answers that share words rank close and others do not."""

    model = "hashed-bigrams"
    DIM = 64

    async def embed(self, texts: list[str]) -> np.ndarray:
        rows = np.zeros((len(texts), self.DIM), dtype=np.float32)
        for row, text in zip(rows, texts):
            for a, b in zip(text, text[1:]):
                row[zlib.crc32((a + b).encode("utf-8")) % self.DIM] += 1.0
        return rows

    def describe(self) -> dict[str, str]:
        return {"kind": "hashed-bigrams"}

    async def aclose(self) -> None:
        pass


# ---- what is compared ------------------------------------------------------------------------

def prompt_digests(run_dir: Path) -> bytes:
    """Per task, in sample order: sha256 over every rendered prompt (canonical JSON), and a short
    digest per sample so a mismatch names the samples whose prompt changed.

    The prompts are the ones the run stored (once each, in responses.sqlite; each sample of
    samples.jsonl names its key) — unpacked, they are the very JSON samples.jsonl used to repeat."""
    by_task: dict[str, list[tuple[str, str]]] = {}
    for sample in RunDir(run_dir).read_samples(prompts=True):
        canonical = json.dumps(sample["prompt"], sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        by_task.setdefault(sample["task"], []).append((sample["id"], canonical))
    out = {}
    for task, prompts in by_task.items():
        out[task] = {
            "n": len(prompts),
            "sha256": hashlib.sha256("\n".join(p for _, p in prompts).encode("utf-8")).hexdigest(),
            "samples": {sid: hashlib.sha256(p.encode("utf-8")).hexdigest()[:16] for sid, p in prompts},
        }
    return (json.dumps(out, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


@dataclass(frozen=True)
class Produced:
    """One file's bytes as produced now; ``source`` says by what: "run", "rescore" (default
    scoring) or "rescore-<compat>"."""

    run: str
    file: str
    source: str
    data: bytes

    @property
    def path(self) -> str:
        """Where the golden copy lives, relative to ``expected/``."""
        return f"{self.run}/{self.file}"

    @property
    def scoring(self) -> str | None:
        """The scoring a metrics file holds ("default" or a compat mode); None for other files."""
        parts = self.file.split(".")
        if parts[0] != "metrics":
            return None
        return parts[1] if len(parts) == 3 else "default"


def generate(root: Path) -> list[Produced]:
    """Run every fixture run under ``root`` and re-score it in every scoring; collect the files."""
    concepts.register_extractor(UMLS_EXTRACTOR, FakeExtractor)
    data = write_fixture_data(root / "data")
    results = root / "runs"
    out: list[Produced] = []
    for fixture in fixture_runs(data):
        pool = candidates(fixture.config)
        respond = responder(pool)
        outcome = asyncio.run(execute(fixture.config, lambda _, respond=respond: ScriptedBackend(respond, model=MODEL), results,
                                      embedder_factory=lambda _: HashedBigramEmbedder()))
        path = outcome.run_dir.path
        check_identified(path, pool)
        out.append(Produced(fixture.name, "metrics.json", "run", (path / "metrics.json").read_bytes()))
        out.append(Produced(fixture.name, "prompts.sha256.json", "run", prompt_digests(path)))
        rescore(path)
        out.append(Produced(fixture.name, "metrics.json", "rescore", (path / "metrics.json").read_bytes()))
        for compat in fixture.compats:
            rescore(path, compat)
            name = f"metrics.{compat}.json"
            out.append(Produced(fixture.name, name, f"rescore-{compat}", (path / name).read_bytes()))
    return out


def covered(produced: list[Produced]) -> list[tuple[str, str]]:
    """(task or suite, scoring) pairs whose metrics the files hold."""
    return sorted({(name, p.scoring) for p in produced if p.scoring for name in json.loads(p.data)})


def save(produced: list[Produced], out: Path) -> None:
    """Every produced file as ``out/<source>/<run>/<file>`` (what ``--out`` writes, the test reads)."""
    for p in produced:
        target = out / p.source / p.path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(p.data)


def load(out: Path) -> list[Produced]:
    return [Produced(run=f.parent.name, file=f.name, source=f.parent.parent.name, data=f.read_bytes())
            for f in sorted(out.glob("*/*/*.json"))]


def write_expected(produced: list[Produced], expected: Path = EXPECTED) -> None:
    """Replace the golden files with what was produced first for each (the run, or the re-score in a
    compatibility mode); the default re-score must reproduce what the run wrote."""
    written: dict[str, bytes] = {}
    for p in produced:
        written.setdefault(p.path, p.data)
        if p.data != written[p.path]:
            raise SystemExit(f"{p.path}: the {p.source} disagrees with what the run wrote; nothing written")
    shutil.rmtree(expected, ignore_errors=True)
    for path, data in written.items():
        (expected / path).parent.mkdir(parents=True, exist_ok=True)
        (expected / path).write_bytes(data)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", action="store_true", help=f"(re)write the golden files under {EXPECTED}")
    action.add_argument("--out", type=Path, help="write every produced file under OUT/<source>/ (for the test)")
    args = parser.parse_args(argv)
    if os.environ.get("PYTHONHASHSEED") != HASH_SEED:
        # see HASH_SEED: start again with the seed fixed (and nothing from a hub, as the tests run)
        env = {**os.environ, "PYTHONHASHSEED": HASH_SEED, "HF_HUB_OFFLINE": "1"}
        os.execve(sys.executable, [sys.executable, "-m", __spec__.name, *(argv or sys.argv[1:])], env)
    with tempfile.TemporaryDirectory() as tmp:
        produced = generate(Path(tmp))
    if args.out:
        save(produced, args.out)
        return 0
    write_expected(produced)
    print(f"wrote {len({p.path for p in produced})} golden files under {EXPECTED}; they hold metrics of:")
    for name, scoring in covered(produced):
        print(f"  {name}\t{scoring}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
