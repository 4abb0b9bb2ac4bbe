"""Tasks as files: a YAML task file + a template, validated, built into a :class:`~evalpipe.tasks.base.TaskSpec`.

``source`` reads YAML with line numbers, ``schema`` is the typed schema (pydantic), ``locate`` finds
the data files, ``load`` turns records into examples, ``build`` makes the TaskSpec (kind, template,
hook), ``discover`` finds shipped and user task files, ``scaffold`` writes a new task from a data file.
"""
