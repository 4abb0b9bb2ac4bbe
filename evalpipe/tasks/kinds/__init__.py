"""Task kinds: one module per kind (``classification``, ``multiple_choice``, ``generation``,
``code_list``, ``span_ner``, ``retrieval``), each its schema model, gold reader and default scoring;
:mod:`evalpipe.tasks.kinds.base` holds the :class:`~evalpipe.tasks.kinds.base.Kind` record and the
registry by name (every module here registers its kind on import)."""
