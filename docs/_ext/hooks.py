"""MkDocs hooks (mkdocs.yml `hooks:`): two kinds of link that are right in the repository but have no target on
the site, rewritten for the site only (the Markdown files are not changed):

* ``../README.md`` (the repository's README, outside docs/): the site's landing page, index.md, which
  carries the README's quick start and its quick table;
* a link to a folder of docs/ (``results/``: the raw outputs; GitHub lists a folder, a static site has no
  listing): kept as text, without the link.

Every other link is checked by ``mkdocs build --strict`` as written.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

LINK = re.compile(r"\[([^\]]+)\]\(([^)\s#]+)(#[^)\s]*)?\)")


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any, **kwargs: Any) -> str:
    docs = Path(config["docs_dir"])
    here = (docs / page.file.src_path).parent

    def fix(match: re.Match[str]) -> str:
        text, target, anchor = match.group(1), match.group(2), match.group(3) or ""
        if "://" in target:
            return match.group(0)
        resolved = (here / target).resolve()
        if resolved == docs.resolve().parent / "README.md":
            landing = Path("index.md") if here == docs else Path("../" * len(here.relative_to(docs).parts)) / "index.md"
            return f"[{text}]({landing.as_posix()}{anchor})"
        if target.endswith("/") and resolved.is_dir() and docs.resolve() in resolved.parents:
            return text
        return match.group(0)

    return LINK.sub(fix, markdown)
