"""What a run directory declares about its tasks, as plain records both sides may import.

The run directory is the contract between the pipeline and its readers (report, judging,
re-scoring): ``config.json`` records each task's kind, its metrics, the suites its tasks belong to
(with their aggregates' formulas, ``suite_aggregates``) and the reference boards (published rows)
its task families show. The records here are that contract's vocabulary — frozen, JSON round-tripping, importing nothing of ``evalpipe.tasks`` or
``evalpipe.report`` — so a task family declares what it wants shown as data, and the report
renders it without loading a task (``docs/architecture.md``, "The run directory is the contract").
"""
