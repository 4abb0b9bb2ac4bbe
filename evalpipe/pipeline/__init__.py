"""The run's stages, in the order data flows through them.

``prepare`` (load, subset, shots, render into the ``stage``) → ``budget`` (fit long prompts to
the context) → ``execute`` (under the run directory's lock: plan into the store, ``fetch`` the
pending prompts, each answer committed on arrival by the ``answer_writer``, then score and write).
``config_record`` writes what the run was (``config.json``); ``endpoint_policy`` guards where data
may go. See docs/architecture.md, "The life of one sample".
"""
