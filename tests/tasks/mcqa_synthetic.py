"""SYNTHETIC fixtures in the MedQA, MedMCQA, PubMedQA (PQA-L) and MMLU file formats.

Every question, option and context below was written for these tests; none comes from the real data
sets (which evalpipe does not ship). Only the formats follow the published ones: MedQA's JSON lines
(``question``, ``options`` {A..D}, ``answer_idx``, ``answer``), MedMCQA's JSON lines (``opa``..``opd``,
``cop`` 1-based as in its GitHub release), PubMedQA's ``ori_pqal.json`` (one object keyed by PubMed
id) and MMLU's header-less CSV files (question, A, B, C, D, answer) in ``data/test`` and ``data/dev``.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

SYNTHETIC = "SYNTHETIC test data written for evalpipe; not from MedQA, MedMCQA, PubMedQA or MMLU"

QUESTIONS = [
    ("Which vitamin deficiency causes scurvy?", ["Vitamin A", "Vitamin B12", "Vitamin C", "Vitamin D"], "C"),
    ("Which organ produces insulin?", ["Liver", "Pancreas", "Spleen", "Kidney"], "B"),
    ("Which drug reverses opioid overdose?", ["Naloxone", "Flumazenil", "Atropine", "Protamine"], "A"),
    ("Which electrolyte disturbance causes peaked T waves?", ["Hyponatraemia", "Hypokalaemia", "Hypercalcaemia",
                                                              "Hyperkalaemia"], "D"),
    ("Which bone is in the forearm?", ["Femur", "Radius", "Tibia", "Humerus"], "B"),
    ("Which cells make antibodies?", ["Plasma cells", "Neutrophils", "Platelets", "Erythrocytes"], "A"),
    ("Which valve lies between left atrium and left ventricle?", ["Aortic", "Pulmonary", "Mitral",
                                                                   "Tricuspid"], "C"),
    ("Which nerve is compressed in carpal tunnel syndrome?", ["Ulnar", "Radial", "Axillary", "Median"], "D"),
]
LETTERS = "ABCD"


def write_medqa(folder: Path) -> Path:
    """``phrases_no_exclude_{test,train}.jsonl``: test = questions 0-4, train = 5-7."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, rows in (("test", QUESTIONS[:5]), ("train", QUESTIONS[5:])):
        with (folder / f"phrases_no_exclude_{name}.jsonl").open("w", encoding="utf-8") as out:
            for question, options, letter in rows:
                record = {"question": f"{question} (synthetic MedQA)", "options": dict(zip(LETTERS, options)), "answer_idx": letter,
                          "answer": options[LETTERS.index(letter)], "meta_info": "step1", "note": SYNTHETIC}
                out.write(json.dumps(record) + "\n")
    return folder / "phrases_no_exclude_test.jsonl"


def medmcqa_records(rows, base: int = 1) -> list[dict]:
    return [{"id": f"q{i}", "question": f"{q} (synthetic MedMCQA)", **{f"op{c}": o for c, o in zip("abcd", options)},
             "cop": LETTERS.index(letter) + base, "subject_name": "Medicine", "choice_type": "single",
             "exp": SYNTHETIC} for i, (q, options, letter) in enumerate(rows)]


def write_medmcqa(folder: Path, base: int = 1) -> Path:
    """``dev.json`` (questions 0-4) and ``train.json`` (5-7), JSON lines, ``cop`` counted from ``base``."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, rows in (("dev", QUESTIONS[:5]), ("train", QUESTIONS[5:])):
        (folder / f"{name}.json").write_text(
            "".join(json.dumps(r) + "\n" for r in medmcqa_records(rows, base)), encoding="utf-8")
    return folder / "dev.json"


PUBMEDQA = {
    "90000001": ("Does daily walking lower resting blood pressure in adults?", "yes"),
    "90000002": ("Does hair colour predict the response to antibiotics?", "no"),
    "90000003": ("Is a short nap associated with better recall in students?", "maybe"),
    "90000004": ("Does hand washing reduce ward infections?", "yes"),
}


def write_pubmedqa(path: Path) -> Path:
    """``ori_pqal.json``: one object keyed by (made-up) PubMed ids, pretty-printed like the original."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {pmid: {"QUESTION": q, "CONTEXTS": [f"Background for: {q}", f"Results: {SYNTHETIC}."],
                   "LABELS": ["BACKGROUND", "RESULTS"], "MESHES": ["Humans"], "YEAR": "2020",
                   "reasoning_required_pred": decision, "reasoning_free_pred": decision,
                   "final_decision": decision, "LONG_ANSWER": "Synthetic."}
            for pmid, (q, decision) in PUBMEDQA.items()}
    path.write_text(json.dumps(data, indent=1), encoding="utf-8")
    return path


MMLU_SUBJECTS = ("anatomy", "clinical_knowledge", "college_biology", "college_medicine", "medical_genetics",
                 "professional_medicine")


def write_mmlu(root: Path, subjects=MMLU_SUBJECTS) -> Path:
    """``root/data/{test,dev}/<subject>_{test,dev}.csv`` without header rows; 3 test rows, 5 dev rows."""
    for subject in subjects:
        for split, rows in (("test", QUESTIONS[:3]), ("dev", QUESTIONS[3:])):
            folder = root / "data" / split
            folder.mkdir(parents=True, exist_ok=True)
            with (folder / f"{subject}_{split}.csv").open("w", encoding="utf-8", newline="") as out:
                writer = csv.writer(out)
                for question, options, letter in rows:
                    writer.writerow([f"{question} ({subject})", *options, letter])
    return root


def write_all(root: Path) -> Path:
    """Every format in one --data-dir: MedQA, MedMCQA, PubMedQA and MMLU files side by side."""
    write_medqa(root)
    write_medmcqa(root)
    write_pubmedqa(root / "ori_pqal.json")
    write_mmlu(root)
    return root
