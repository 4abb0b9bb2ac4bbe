"""Clinical multiple-choice benchmarks (MedQA, MedMCQA, PubMedQA, MMLU's medical subjects): task files in
``prompts/mcqa/``; here only what a task file cannot say (the ``mmlu_medical`` suite's average)."""
