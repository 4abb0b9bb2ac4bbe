"""MacroMemo (evalpipe.template_limits): a template's macro called on nothing but the renderer's
fixed values (its shots) is rendered once and its text reused; any other call renders every time,
and the prompts are those rendered without the memo."""

from __future__ import annotations

from typing import Any

from evalpipe.template_limits import BoundedSandbox, MacroMemo, render_budget

SOURCE = """
{%- macro head() -%}[{{ probe('head') }}]{%- endmacro -%}
{%- macro shot_block(shot) -%}{{ probe('shot') }}{{ shot.inputs.text }} => {{ shot.target }}{%- endmacro -%}
{%- macro quoted(text) -%}{{ probe('quoted') }}"{{ text }}"{%- endmacro -%}
{%- macro wrap() -%}{{ probe('wrap') }}<{{ caller() }}>{%- endmacro -%}
{%- macro prompt(example, shots) -%}
{{ head() }}{% for shot in shots %}{{ shot_block(shot) }}|{{ quoted(shot.target) }}|{% endfor %}
{{ quoted(example.text) }}{% call wrap() %}{{ example.text }}{% endcall %}{{ shot_block(shot=shots[0]) }}
{%- endmacro -%}
"""


def render(memo: MacroMemo | None, shots: list[dict[str, Any]], texts: list[str]) -> tuple[list[str], dict[str, int]]:
    counts: dict[str, int] = {}

    def probe(name: str) -> str:
        counts[name] = counts.get(name, 0) + 1
        return ""

    environment = BoundedSandbox()
    environment.globals["probe"] = probe
    module = environment.from_string(SOURCE).make_module({})
    out = []
    for text in texts:
        with render_budget(memo):
            out.append(str(module.prompt({"text": text}, shots)))
    return out, counts


def shots() -> list[dict[str, Any]]:
    return [{"inputs": {"text": f"shot {i}"}, "target": f"answer {i}"} for i in range(3)]


def test_fixed_calls_render_once_and_the_prompts_are_unchanged():
    texts = [f"example {i}" for i in range(5)]
    fixed = shots()
    with_memo, counts = render(MacroMemo([fixed]), fixed, texts)
    without, plain = render(None, shots(), texts)
    assert with_memo == without
    assert plain == {"head": 5, "shot": 20, "quoted": 20, "wrap": 5}
    # once per shot (and head once); the target strings are the shots' own objects: once each too;
    # the example's text, the caller block and the keyword call render every time
    assert counts == {"head": 1, "shot": 3 + 5, "quoted": 3 + 5, "wrap": 5}


def test_equal_values_that_are_not_the_fixed_objects_render_every_time():
    fixed = shots()
    memo = MacroMemo([fixed])
    _, counts = render(memo, shots(), ["a", "b"])  # equal shots, other objects
    assert counts["shot"] == 8


def test_two_renderers_do_not_share_their_texts():
    first, second = shots(), [{"inputs": {"text": "other"}, "target": "other answer"}]
    a, _ = render(MacroMemo([first]), first, ["x"])
    b, _ = render(MacroMemo([second]), second, ["x"])
    assert "shot 0 => answer 0" in a[0] and "other => other answer" in b[0] and "shot 0" not in b[0]
