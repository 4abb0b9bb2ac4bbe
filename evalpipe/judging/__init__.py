"""LLM judges and juries for free-text answers: ``evalpipe judge RUN --judge MODEL=URL …``.

ROUGE and BERTScore say little about whether a clinical summary or answer is *right*; clinical
evaluations (MedHELM among them) add a jury of LLM judges that rate each answer on criteria such as
accuracy, completeness and clarity. This package rates a finished run's free-text answers without
asking the evaluated model again, from the run directory alone:

``items``      which samples are judged and what a judge sees of them (``samples.jsonl``: inputs,
               reference, answer); a task says its answers are free text (``TaskSpec.answer_kind``)
``rubric``     the rubric: a sandboxed Jinja template (``prompts/judge/*.j2``) that declares its
               criteria and scale and renders the judge's request (never the evaluated model's name)
``parse``      a judge's reply → ratings; tolerant of code fences and prose, never a 0 for garbage
``panel``      the judges (``MODEL=URL``, or a local engine) and the patient-data guard
``run``        the judge run: requests through the same :class:`~evalpipe.backends.base.Backend`
               protocol, each reply committed to the run's SQLite store on arrival (resume), one
               retry of an unusable reply
``agreement``  Krippendorff's alpha (ordinal), also as a declared aggregation of per-sample parts
``aggregate``  verdicts → metrics, per-sample records and declared aggregations
``attach``     writes them into the run directory (and keeps them when ``evalpipe score`` re-scores)

Definitions (``metrics.json``, under the task): ``judge_<criterion>`` is the mean over judged samples
of the judges' mean rating of the sample; ``judge[<model>]_<criterion>`` one judge's mean over the
samples it rated; ``judge_alpha_<criterion>`` Krippendorff's alpha, ordinal, judges as coders, samples
as units; ``judge_failures`` the (sample, judge) pairs without a usable rating — never counted as a
rating; ``judge_n`` the samples with at least one usable rating.
"""
