"""MkDocs hooks of the docs site (mkdocs.yml ``hooks:``).

The docstrings name other objects with Sphinx's roles (``:class:`~rltrain.Trainer```), which
mkdocstrings' Google style does not know: without this hook the reference pages would show
``:class:`` before the name. Each role becomes the name as code, the last dotted part for a
``~`` name (as Sphinx shows it).
"""

from __future__ import annotations

import re
from typing import Any

#: A role as it reaches the HTML: ``:class:<code>~a.b.C</code>``.
ROLE = re.compile(r":(?:class|func|meth|mod|data|attr|exc|obj):<code>(~?)([^<]+)</code>")


def on_page_content(html: str, **kwargs: Any) -> str:
    """The page's HTML with every Sphinx role turned into a plain code name."""
    return ROLE.sub(lambda m: f"<code>{m[2].rsplit('.', 1)[-1] if m[1] else m[2]}</code>",
                    html)
