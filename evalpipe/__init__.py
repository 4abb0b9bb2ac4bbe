"""evalpipe: evaluate LLMs on clinical and biomedical language tasks.

Data flow (one module per arrow): tasks → prompting → backends → cache → parsers → metrics → results.
"""

__version__ = "0.1.0"
