"""Issue 28 phase 2: the XML-tag answer parser as of a base revision (``--base``, default the
merge base with main) against this checkout's, side by side in one process.

The base's ``evalpipe/parsers/xml_tags.py`` is read with ``git show`` and loaded as a module of
its own (it imports only modules that still exist), so both parsers run on the same answers in
the same interpreter, rounds interleaved. The answers: the 940 NCBI Disease test sentences,
each answered four ways in turn (the gold tagged copy; one entity's tags left out; a chatty
preamble; the text re-spaced with a few characters altered: ``ﬁ``, full-width letters, a
zero-width space, ``…``), so both the equal-keys path and the SequenceMatcher path are used.
Timed:

- ``keys``   the alignment keys the new parser asks for (every source, and every answer's
             tag-stripped text unless it is an exact copy, whose keys are the source's), base
             ``_keys`` against :func:`~evalpipe.parsers.text_keys.text_keys` on the same calls;
- ``parse``  ``parse_tagged_answer`` on every answer, base module against this one; then on each
             kind of answer alone (``copy``, ``untag``, ``chat``, ``alter``, in the order above);
- ``stage``  what preparing does with each rendered prompt (the 940 sentences' 5-shot chat
             prompts, cycled as the answers): its cache key and its packed JSON, with the base's
             ``evalpipe/store/keys.py`` and ``prompt_pack.py`` against this checkout's (rendering
             itself is not compared: it did not change).

Every key triple, parse, cache key and packed prompt is checked identical between the two before any timing. The
machine is shared: the load average is printed before and after; read the ratios.

    /work/main/.venv/bin/python bench/parser_speed.py --repeat 5 --cycles 10

Findings
========

Branch speed2 against main 70677b2 (2026-12-03, 12:28 UTC), ``--repeat 5 --cycles 10``: 9,400
answers and 9,400 prompts; the machine was quiet for once (load average 0.08 before, 0.39
after), best of 5 interleaved rounds (medians within 5 %):

- keys: 0.219 s -> 0.090 s, x2.43 (11,750 calls, 1.8 M characters; the reading loop runs in C:
  ``str.translate`` over a per-character table, offsets by ``itertools``; ASCII by
  ``split``/``lower`` and a byte mask);
- parse, all answers: 1.081 s -> 0.672 s, x1.61; by kind: copy x3.01 (86 -> 29 us an answer),
  untagged entity x3.46, chatty preamble x3.25, altered text x1.02. Besides the keys: the
  alignment tables by slices and ``accumulate`` (the identity outright for equal keys), an exact
  copy compared once and given the source's keys. The altered answers go through
  ``difflib.SequenceMatcher``, which is most of their time and unchanged (it decides the spans);
- stage (key + packed JSON per rendered prompt): 0.396 s -> 0.295 s, x1.34 (42 -> 31 us a
  prompt): the params' JSON reused by identity across a plan's prompts, each shared text hashed
  once per packer. Rendering was not changed: it is 64 us of a 5-shot NCBI prompt, 51 us of it
  the five shots (13 us zero-shot), and rendering them once needs a template contract change
  (a shots macro of its own), since a ``prompt`` macro may mix shots and example in any way.
  Giving the templates attribute-style dicts (no ``AttributeError`` in Jinja's ``getattr``) was
  tried and is slower (97 us): the sandbox's safety checks on a found attribute cost more.

For the 94,000-sentence run of ``bench/overlap.py`` that is, on a quiet machine, ~5 s less per
pass of parsing gold-like answers (~57 us an answer; chunked scoring parses again when the
records are read) and ~1 s less staging (~11 us a prompt); the NCBI read and the Jinja shots
remain the bulk of preparing. cProfile had put ``_keys`` at 94 s of that run's scoring: most of
that was the profiler's own cost on 24 million ``_norm`` calls, which no longer exist.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from evalpipe.parsers import xml_tags
from evalpipe.parsers.text_keys import text_keys
from evalpipe.pipeline.render import dumps_packed
from evalpipe.prompting import PromptRenderer, select_shots
from evalpipe.records import GenerationParams, Prompt, to_jsonable
from evalpipe.store import keys as store_keys
from evalpipe.store import prompt_pack
from evalpipe.tasks.base import LoadOptions
from evalpipe.tasks.registry import get_task

def load_base(rev: str, path: str = "evalpipe/parsers/xml_tags.py") -> ModuleType:
    """The module at ``path`` as of ``rev``, loaded under a name of its own (``<stem>_base``)."""
    root = Path(__file__).resolve().parent.parent
    source = subprocess.run(["git", "-C", str(root), "show", f"{rev}:{path}"],
                            check=True, capture_output=True, text=True).stdout
    module = ModuleType(f"{Path(path).stem}_base")
    sys.modules[module.__name__] = module  # dataclasses look their module up while decorating
    exec(compile(source, f"{rev}:{path}", "exec"), module.__dict__)
    return module


def _stage_rows(keys: ModuleType, pack: ModuleType, prompts: list[Prompt]) -> list[tuple[str, str]]:
    """What ``render.stage_all`` does per prompt once it is rendered: its key and its packed JSON."""
    packer = pack.Packer()
    packer.learn(to_jsonable(p) for p in prompts[:pack.LEARN])
    return [(keys.cache_key("m", p), dumps_packed(packer.pack(to_jsonable(p)))) for p in prompts]


def _prompts(cycles: int) -> list[Prompt]:
    """The NCBI test sentences' 5-shot chat prompts, rendered once (rendering is not compared)."""
    spec = get_task("ncbi_disease")
    data = spec.load(LoadOptions())
    renderer = PromptRenderer(spec, select_shots(data.shot_pool, 5, spec.fewshot_seed), GenerationParams(max_tokens=512))
    return [renderer.render(ex) for ex in list(data.examples)] * cycles


def _altered(answer: str) -> str:
    """The answer re-spaced, with characters whose keys take the slow paths."""
    return (answer.replace(" ", "  ").replace("fi", "ﬁ", 1).replace("a", "ａ", 2)
            .replace(" .", " \u200b.", 1).replace(" ,", " …", 1))


def _cases(cycles: int) -> list[tuple[str, str]]:
    spec = get_task("ncbi_disease")
    examples = list(spec.load(LoadOptions()).examples)
    cases: list[tuple[str, str]] = []
    for i in range(cycles * len(examples)):
        ex = examples[i % len(examples)]
        gold = spec.shot_target(ex)
        answer = (gold if i % 4 == 0 else gold.replace("<disease>", "", 1).replace("</disease>", "", 1) if i % 4 == 1
                  else f"Sure, here it is:\n{gold}" if i % 4 == 2 else _altered(gold))
        cases.append((answer, ex.inputs["text"]))
    return cases


def _key_calls(cases: list[tuple[str, str]]) -> list[tuple[str, int]]:
    """The (text, limit) pairs the parser hands to its key function for these answers."""
    calls: list[tuple[str, int]] = []
    original = xml_tags.text_keys

    def record(text: str, limit: int) -> tuple[str, list[int], bool]:
        calls.append((text, limit))
        return original(text, limit)

    xml_tags.text_keys = record  # type: ignore[assignment]
    try:
        for answer, source in cases:
            xml_tags.parse_tagged_answer(answer, source, {"disease": "Disease"})
    finally:
        xml_tags.text_keys = original
    return calls


def _parse_all(module: ModuleType, cases: list[tuple[str, str]]) -> list[Any]:
    return [module.parse_tagged_answer(a, s, {"disease": "Disease"}) for a, s in cases]


def _comparable(parse: Any) -> tuple[Any, ...]:
    """A parse as plain values: the two modules' TaggedParse classes are distinct classes."""
    return tuple(parse.spans), dict(parse.diagnostics), parse.failed


def _time(action: Callable[[], object]) -> float:
    gc.collect()
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="", help="revision whose parser is the baseline (default: merge base with main)")
    parser.add_argument("--cycles", type=int, default=10, help="times the 940 sentences are cycled")
    parser.add_argument("--repeat", type=int, default=5, help="interleaved rounds of base and new")
    args = parser.parse_args()
    root = Path(__file__).resolve().parent.parent
    rev = args.base or subprocess.run(["git", "-C", str(root), "merge-base", "HEAD", "main"], check=True,
                                      capture_output=True, text=True).stdout.strip()
    base = load_base(rev)
    cases = _cases(args.cycles)
    calls = _key_calls(cases)
    assert all(base._keys(t, n) == text_keys(t, n) for t, n in calls), "keys differ"
    assert list(map(_comparable, _parse_all(base, cases))) == list(map(_comparable, _parse_all(xml_tags, cases))), \
        "parses differ"
    base_keys, base_pack = load_base(rev, "evalpipe/store/keys.py"), load_base(rev, "evalpipe/store/prompt_pack.py")
    prompts = _prompts(args.cycles)
    assert _stage_rows(base_keys, base_pack, prompts) == _stage_rows(store_keys, prompt_pack, prompts), "staging differs"
    print(f"{len(prompts)} prompts staged: identical keys and packed JSON")
    print(f"base {rev[:10]}: {len(cases)} answers, {len(calls)} key calls, {sum(len(t) for t, _ in calls):,} "
          f"characters; identical keys and parses; load average {os.getloadavg()[0]:.2f}")
    keys_of: dict[str, Callable[[str, int], Any]] = {"base": base._keys, "new": text_keys}
    modules = {"base": base, "new": xml_tags}
    times: dict[tuple[str, str], list[float]] = {}
    # the parse again on each kind of answer alone: the altered quarter goes through SequenceMatcher
    subsets = {"  copy": cases[0::4], "  untag": cases[1::4], "  chat": cases[2::4], "  alter": cases[3::4]}
    for _ in range(args.repeat):
        for name in ("base", "new"):
            keys, module = keys_of[name], modules[name]
            times.setdefault(("keys", name), []).append(_time(lambda k=keys: [k(t, n) for t, n in calls]))
            times.setdefault(("parse", name), []).append(_time(lambda m=module: _parse_all(m, cases)))
            stage_modules = (base_keys, base_pack) if name == "base" else (store_keys, prompt_pack)
            times.setdefault(("stage", name), []).append(_time(lambda m=stage_modules: _stage_rows(*m, prompts)))
            for kind, subset in subsets.items():
                times.setdefault((kind, name), []).append(_time(lambda m=module, c=subset: _parse_all(m, c)))
    for what in ("keys", "parse", *subsets, "stage"):
        old, new = min(times[(what, "base")]), min(times[(what, "new")])
        print(f"{what:7} base {old:7.3f} s  new {new:7.3f} s  base/new x{old / new:5.2f}  (medians "
              f"{statistics.median(times[(what, 'base')]):.3f} / {statistics.median(times[(what, 'new')]):.3f})")
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
