"""Text normalisation and tokenisation shared by parsers and metrics (one module per script)."""
