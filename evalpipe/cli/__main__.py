"""``python -m evalpipe.cli``: the same command as ``evalpipe``."""

from evalpipe.cli import main

main()
