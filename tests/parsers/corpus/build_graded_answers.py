"""Writes ``tests/parsers/graded_answers.jsonl``: answers in real models' habits with the label a careful
human grader gives them (the option a grader reads, or ``fail`` for a hedge, refusal, empty answer or an
answer only inside an unclosed ``<think>``).

Each answer is written here by hand, as a pattern over a question's options (``{L}`` the letter the
answer commits to, ``{T}`` its text, ``{X}``/``{Y}`` other letters, ``{XT}`` another option's text) and
filled in for several questions, so the same habit is seen with different letters and texts. Part
``heldout`` was written before the grading rules were finished and is not tuned against (see
docs/grading.md). Run ``python tests/parsers/corpus/build_graded_answers.py`` to rewrite the file.
"""

from __future__ import annotations

import json
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "graded_answers.jsonl"

QUESTIONS = {
    "pheo": {"A": "Plasma free metanephrines", "B": "Serum TSH", "C": "24-hour urine cortisol",
             "D": "Dexamethasone suppression test"},
    "ethambutol": {"A": "Isoniazid", "B": "Rifampicin", "C": "Ethambutol", "D": "Pyrazinamide"},
    "phrenic": {"A": "Vagus nerve", "B": "Phrenic nerve", "C": "Intercostal nerves", "D": "Accessory nerve"},
    "anaphylaxis": {"A": "Oral cetirizine", "B": "IV hydrocortisone", "C": "Nebulised salbutamol",
                    "D": "Intramuscular epinephrine"},
    "intussusception": {"A": "Meckel diverticulum", "B": "Intussusception", "C": "Midgut volvulus",
                        "D": "Pyloric stenosis"},
    "graves": {"A": "Graves disease", "B": "Hashimoto thyroiditis", "C": "Toxic multinodular goiter",
               "D": "Subacute thyroiditis", "E": "Factitious thyrotoxicosis"},
}
#: which letter each question's answers commit to, and two other letters they mention
PICKS = {"pheo": ("A", "B", "C"), "ethambutol": ("C", "A", "D"), "phrenic": ("B", "A", "D"),
         "anaphylaxis": ("D", "B", "A"), "intussusception": ("B", "C", "A"), "graves": ("A", "E", "B")}
PUBMEDQA = {"A": "yes", "B": "no", "C": "maybe"}

# (habit, pattern, label) — label "L" means the committed letter, "fail" a counted failure
TUNE_MCQA = [
    ("terse", "{L}", "L"), ("terse", "{L}.", "L"), ("terse", "({L})", "L"), ("terse", "{l}", "L"),
    ("terse", "Option {L}", "L"), ("terse", "[{L}]", "L"), ("terse", " {L}\n", "L"),
    ("stated", "The answer is {L}.", "L"), ("stated", "Answer: {L}", "L"),
    ("stated", "The correct answer is ({L}).", "L"), ("stated", "Final answer: {L}", "L"),
    ("stated", "{L} is the correct answer.", "L"), ("stated", "{L} is correct.", "L"),
    ("stated", "The best answer here is {L}.", "L"), ("stated", "I'd go with {L}.", "L"),
    ("stated", "the answer is {l}", "L"), ("stated", "Correct option: {L}", "L"),
    ("restated", "{L}. {T}", "L"), ("restated", "{L}) {T}", "L"), ("restated", "{L} - {T}", "L"),
    ("restated", "**{L}** {T}", "L"), ("restated", "{L}: {T}", "L"), ("restated", "Answer: {L}. {T}", "L"),
    ("restated", "{T} ({L})", "L"), ("restated", "{T}", "L"), ("restated", "{T}.", "L"),
    ("verbose", "Considering the presentation and the key findings, the most appropriate choice is {L}.", "L"),
    ("verbose", "This is classic, so {L}, {t}.", "L"),
    ("verbose", "{T} (option {L}) is the right choice here; the other options do not fit.", "L"),
    ("verbose", "Answer: The findings point to {t} ({L}).", "L"),
    ("verbose", "Let's go through it. {XT} does not explain the findings. {YT} is unlikely too. "
                "That leaves {T}.\n\nThe answer is {L}.", "L"),
    ("markdown", "**Answer: {L}**\n\n**Explanation:** {T} best fits the vignette.", "L"),
    ("markdown", "### Final Answer\n**{L}. {T}**", "L"),
    ("markdown", "- **Answer:** {L}\n- **Rationale:** {T} is first-line here.", "L"),
    ("markdown", "**Correct answer: ({L})**", "L"),
    ("reasoning", "<think>\nOption {X} is tempting but wrong. {L} fits best.\n</think>\n\n{L}", "L"),
    ("reasoning", "<think>Could it be {X} or {Y}? No. It's {L}.</think>The answer is {L}.", "L"),
    ("reasoning", "Okay, weighing {X} against {L}... {L} wins.\n</think>\n\n**{L}**", "L"),
    ("reasoning", "<think>\nThe question asks about {t}. Let me weigh option {X} against option {L}", "fail"),
    ("reasoning", "<think>First, recall that", "fail"),
    ("list", "1. Option {X}: wrong, because it does not match.\n2. Option {L}: correct.\n\nAnswer: {L}", "L"),
    ("list", "Eliminating:\n- {X}: no\n- {Y}: no\n\nSo the answer is {L}.", "L"),
    ("negation", "The answer is not {X}; it is {L}.", "L"),
    ("negation", "{X} is incorrect. The correct answer is {L}.", "L"),
    ("negation", "Not {X}. The answer is {L}.", "L"),
    ("stated_then_other", "The answer is {L}. Options {X} or {Y} are not supported by the findings.", "L"),
    ("stated_then_other", "Answer: {L} (not {X}/{Y})", "L"),
    ("stated_then_other", "Answer: {L}\nExplanation: unlike option {X} or {Y}, {t} explains every finding.", "L"),
    ("hedge", "{L} or {X}", "fail"), ("hedge", "Either {X} or {L}.", "fail"),
    ("hedge", "It is between {L} and {X}; I cannot be sure.", "fail"),
    ("hedge", "I think it could be {L} or {X}, hard to say.", "fail"), ("hedge", "{L}/{X}", "fail"),
    ("hedge", "Both {L} and {X} are plausible answers.", "fail"),
    ("refusal", "I'm sorry, but I can't provide medical advice. Please consult a doctor.", "fail"),
    ("refusal", "As an AI, I cannot diagnose patients.", "fail"),
    ("refusal", "I don't know.", "fail"), ("refusal", "There is not enough information to answer this.", "fail"),
    ("empty", "", "fail"), ("empty", "   \n ", "fail"), ("empty", "<think>\nhmm\n</think>\n", "fail"),
    ("chinese", "答案：{L}", "L"), ("chinese", "正确答案是{L}。", "L"), ("chinese", "选{L}", "L"),
    ("chinese", "答案是 {L}. {T}", "L"), ("chinese", "故选{L}。", "L"), ("chinese", "{L}或{X}都有可能。", "fail"),
]

HELDOUT_MCQA = [
    ("terse", "{L})", "L"), ("terse", "**{L}**", "L"), ("terse", "Choice {L}.", "L"),
    ("stated", "My answer is {L}.", "L"), ("stated", "ANSWER: {L}", "L"), ("stated", "So the answer would be {L}.", "L"),
    ("stated", "I choose {L}.", "L"), ("stated", "The right answer: {L}", "L"),
    ("stated", "Answer - {L}", "L"), ("stated", "{L} is the best answer.", "L"),
    ("restated", "{L}. {T}.", "L"), ("restated", "({L}) {T}", "L"), ("restated", "Answer: ({L}) {T}", "L"),
    ("restated", "{t}", "L"),
    ("verbose", "Given the history, the best option is {L} because {t} explains the findings.", "L"),
    ("verbose", "Therefore, {L}.", "L"),
    ("verbose", "{T} is the answer (option {L}).", "L"),
    ("markdown", "## Answer\n\n{L}", "L"), ("markdown", "**Final answer:** {L}", "L"),
    ("markdown", "> **{L}. {T}**\n>\n> This is the classic association.", "L"),
    ("reasoning", "<think>\nLet me consider each option. {X}? no. {Y}? no. {L}? yes.\n</think>\nAnswer: {L}", "L"),
    ("reasoning", "<think>\n{L} or {X}... definitely {L}.\n</think>\n\n{L}. {T}", "L"),
    ("reasoning", "<think>\nThe patient presents with", "fail"),
    ("reasoning", "<think>\nLikely {L}. But option {X} is also possible, let me", "fail"),
    ("list", "Option analysis:\n* {X} - incorrect\n* {Y} - incorrect\n* {L} - correct\n\nFinal answer: {L}", "L"),
    ("negation", "It isn't {X}. The answer is {L}.", "L"),
    ("negation", "{X} would be wrong here; the correct answer is {L}.", "L"),
    ("stated_then_other", "Correct answer: {L}. Option {X} and option {Y} are distractors.", "L"),
    ("stated_then_other", "The answer is {L}; {X} or {Y} would be chosen only if the test were negative.", "L"),
    ("hedge", "Probably {L}, or maybe {X}.", "fail"), ("hedge", "{L} and/or {X}", "fail"),
    ("hedge", "The answer is either {L} or {X}.", "fail"), ("hedge", "Options {L} and {X} are both correct.", "fail"),
    ("refusal", "I cannot answer medical questions.", "fail"),
    ("refusal", "Sorry, I am unable to help with that.", "fail"), ("refusal", "N/A", "fail"),
    ("empty", "**", "fail"), ("empty", "```\n```", "fail"),
    ("chinese", "正确答案：{L}", "L"), ("chinese", "答案为{L}", "L"), ("chinese", "我选{L}。", "L"),
    ("chinese", "我不确定。", "fail"),
]

TUNE_PUBMEDQA = [
    ("terse", "{W}", "W"), ("terse", "{Wc}.", "W"), ("terse", "{L}", "W"), ("stated", "The answer is {W}.", "W"),
    ("stated", "Answer: {W}", "W"), ("restated", "{L} ({W})", "W"), ("restated", "{L}. {W}", "W"),
    ("verbose", "{Wc}, the intervention {effect} in this cohort.", "W"), ("markdown", "**{Wc}**", "W"),
    ("reasoning", "<think>The abstract reports p=0.03 ...</think>\n{Wc}", "W"),
    ("hedge", "yes or maybe", "fail"), ("hedge", "It could be yes or no depending on the subgroup.", "fail"),
    ("refusal", "I cannot determine this from the context.", "fail"),
]
HELDOUT_PUBMEDQA = [
    ("terse", "{W}.", "W"), ("stated", "Final answer: {W}", "W"), ("restated", "Answer: {L}. {Wc}", "W"),
    ("verbose", "Based on the context, {W}.", "W"), ("markdown", "**Answer:** {Wc}", "W"),
    ("reasoning", "<think>\nHmm, the results", "fail"), ("hedge", "{Wc} or {OWc}.", "fail"),
]
PUBMEDQA_WORDS = (("A", "yes", "reduced readmissions"), ("B", "no", "did not change mortality"),
                  ("C", "maybe", "may have lowered costs"))

NLI = {"E": "entailment", "C": "contradiction", "N": "neutral"}
TUNE_NLI = [
    ("terse", "{N}", "N"), ("terse", "{Nc}.", "N"), ("stated", "The relationship is {N}.", "N"),
    ("stated", "Answer: {N}", "N"), ("markdown", "**{Nc}**", "N"),
    ("verbose", "{Nc}: the premise {why}.", "N"), ("reasoning", "<think>maybe {O}?</think>\n{N}", "N"),
    ("negation", "It is not {O}; it is {N}.", "N"), ("hedge", "{N} or {O}", "fail"),
    ("reasoning", "<think>the premise says", "fail"), ("empty", "", "fail"),
]
HELDOUT_NLI = [
    ("terse", "{NU}", "N"), ("stated", "The answer is {N}.", "N"), ("verbose", "Label: {N}. The premise {why}.", "N"),
    ("hedge", "Either {N} or {O}.", "fail"),
]
NLI_WHY = {"entailment": "states it directly", "contradiction": "says the opposite",
           "neutral": "does not mention it"}
NLI_OTHER = {"entailment": "neutral", "contradiction": "entailment", "neutral": "contradiction"}

#: Chinese yes/no sentence-pair labels (``1`` same meaning / ``0`` different), aliases 是/否
ZH = [
    ("tune", "terse", "是", "1"), ("tune", "terse", "否", "0"), ("tune", "terse", "是的。", "1"),
    ("tune", "stated", "答：是", "1"), ("tune", "markdown", "**否**", "0"), ("tune", "stated", "答案：否", "0"),
    ("tune", "reasoning", "<think>两句话意思一样</think>是", "1"), ("tune", "terse", "“否”", "0"),
    ("tune", "reasoning", "<think>两句话", "fail"), ("tune", "empty", "", "fail"),
    ("tune", "hedge", "是或否", "fail"), ("tune", "terse", "１", "1"),
    ("heldout", "terse", "否。", "0"), ("heldout", "stated", "答案是：是", "1"), ("heldout", "markdown", "__是__", "1"),
    ("heldout", "reasoning", "<think>\n不同\n</think>\n\n否", "0"), ("heldout", "refusal", "无法判断", "fail"),
]


def _fill(pattern: str, options: dict[str, str], pick: tuple[str, str, str]) -> str:
    letter, x, y = pick
    return pattern.format(L=letter, l=letter.lower(), T=options[letter], t=options[letter].lower(),
                          X=x, Y=y, XT=options[x], YT=options[y])


def rows() -> list[dict]:
    out = []
    for split, patterns in (("tune", TUNE_MCQA), ("heldout", HELDOUT_MCQA)):
        for qid, options in QUESTIONS.items():
            for habit, pattern, label in patterns:
                out.append({"kind": "letter", "split": split, "habit": habit, "question": qid, "options": options,
                            "answer": _fill(pattern, options, PICKS[qid]),
                            "label": PICKS[qid][0] if label == "L" else "fail"})
    for split, patterns in (("tune", TUNE_PUBMEDQA), ("heldout", HELDOUT_PUBMEDQA)):
        for i, (letter, word, effect) in enumerate(PUBMEDQA_WORDS):
            other = PUBMEDQA_WORDS[(i + 1) % 3][1]
            for habit, pattern, label in patterns:
                answer = pattern.format(W=word, Wc=word.capitalize(), L=letter, effect=effect,
                                        OWc=other.capitalize())
                out.append({"kind": "yes_no_maybe", "split": split, "habit": habit, "question": f"pubmedqa_{word}",
                            "options": PUBMEDQA, "answer": answer, "label": letter if label == "W" else "fail"})
    for split, patterns in (("tune", TUNE_NLI), ("heldout", HELDOUT_NLI)):
        for label_word in NLI.values():
            for habit, pattern, label in patterns:
                answer = pattern.format(N=label_word, Nc=label_word.capitalize(), NU=label_word.upper(),
                                        O=NLI_OTHER[label_word], why=NLI_WHY[label_word])
                out.append({"kind": "nli", "split": split, "habit": habit, "question": f"nli_{label_word}",
                            "options": list(NLI.values()), "answer": answer,
                            "label": label_word if label == "N" else "fail"})
    for split, habit, answer, label in ZH:
        out.append({"kind": "zh_label", "split": split, "habit": habit, "question": "zh_pair",
                    "options": {"labels": ["0", "1"], "aliases": {"是": "1", "否": "0", "是的": "1", "不是": "0"}},
                    "answer": answer, "label": label})
    return out


if __name__ == "__main__":
    lines = rows()
    OUT.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in lines), encoding="utf-8")
    print(f"{len(lines)} answers → {OUT}")
