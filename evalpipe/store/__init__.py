"""The run directory's SQLite store: plan, answers, judgements and what gave them, on arrival."""
