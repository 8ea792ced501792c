"""The documentation site's configuration (mkdocs.yml), cheaply: every page is in the nav or deliberately
excluded, the API reference covers every module of the three packages once, and the docstring rewriter
(docs/_ext/rst_markup.py) and link hook (docs/_ext/hooks.py) do what the site relies on.

The full ``mkdocs build --strict`` (broken links and anchors, bad docstring references) runs in CI through
``make test`` (its ``docs`` prerequisite), not here."""

from __future__ import annotations

import fnmatch
import importlib.util
import logging
import re
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
PACKAGES = ("core_env", "mara_agents", "benchmarks")


class _Loader(yaml.SafeLoader):
    """mkdocs.yml as data: MkDocs' ``!!python/...`` tags (e.g. toc's slugify) are read as plain values."""


_Loader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: loader.construct_mapping(node)
                              if isinstance(node, yaml.MappingNode) else loader.construct_scalar(node))


@pytest.fixture(scope="module")
def config() -> dict:
    return yaml.load((REPO / "mkdocs.yml").read_text(), Loader=_Loader)


def _nav_pages(nav: list) -> list[str]:
    pages = []
    for item in nav:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        pages += _nav_pages(value) if isinstance(value, list) else [value]
    return pages


def _excluded(page: str, patterns: str) -> bool:
    for pattern in patterns.split():
        if pattern.endswith("/") and page.startswith(pattern):
            return True
        if fnmatch.fnmatch(page, pattern.replace("**/", "*")):
            return True
    return False


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _modules() -> set[str]:
    found = set()
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            parts = path.relative_to(REPO).with_suffix("").parts
            if parts[-1] == "__main__":
                continue
            found.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return found


def test_every_page_is_in_the_nav_or_deliberately_excluded(config):
    nav = _nav_pages(config["nav"])
    assert len(nav) == len(set(nav)), "a page is in the nav twice"
    missing = [page for page in nav if not (DOCS / page).is_file()]
    assert not missing, f"the nav names pages that do not exist: {missing}"
    pages = sorted(str(path.relative_to(DOCS)) for path in DOCS.rglob("*.md"))
    orphans = [page for page in pages if page not in nav and not _excluded(page, config["exclude_docs"])]
    assert not orphans, f"pages neither in mkdocs.yml's nav nor in its exclude_docs: {orphans}"
    assert "index.md" in nav and "env.md" in nav and config["strict"] is True


def test_the_api_reference_documents_every_module_once(config):
    api = [page for page in _nav_pages(config["nav"]) if page.startswith("api/")]
    shown: dict[str, str] = {}
    for page in api:
        for name in re.findall(r"^::: *([\w.]+)", (DOCS / page).read_text(), flags=re.M):
            assert name not in shown, f"{name} is on both {shown[name]} and {page}"
            shown[name] = page
    modules = _modules()
    assert not sorted(set(shown) - modules), f"API pages name modules that do not exist: {sorted(set(shown) - modules)}"
    assert not sorted(modules - set(shown)), f"modules missing from the API pages (docs/api/*.md): {sorted(modules - set(shown))}"


def test_the_site_builds_strictly_with_the_pinned_docs_extra_and_the_docstring_rewriter(config):
    import tomllib

    docs = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["docs"]
    assert all("==" in requirement for requirement in docs)
    assert {re.split(r"[\[=]", requirement)[0] for requirement in docs} >= {"mkdocs", "mkdocs-material", "mkdocstrings"}
    options = next(plugin for plugin in config["plugins"] if isinstance(plugin, dict) and "mkdocstrings" in plugin)
    python = options["mkdocstrings"]["handlers"]["python"]["options"]
    assert python["docstring_style"] == "google"
    for extension in python["extensions"]:
        assert (REPO / extension.partition(":")[0]).is_file()
    for hook in config["hooks"]:
        assert (REPO / hook).is_file()


def test_the_landing_page_quotes_the_readme_quick_table():
    readme = (REPO / "README.md").read_text()
    start, end = readme.index("[start:quick-table]"), readme.index("[end:quick-table]")
    assert "<!-- begin generated: quick-table -->" in readme[start:end] and "<!-- end generated: quick-table -->" in readme[start:end]
    assert '--8<-- "README.md:quick-table"' in (DOCS / "index.md").read_text()


def test_the_hook_sends_readme_links_to_the_landing_page_and_drops_folder_links():
    hooks = _load("docs_hooks", DOCS / "_ext" / "hooks.py")

    def render(src: str, text: str) -> str:
        return hooks.on_page_markdown(text, page=SimpleNamespace(file=SimpleNamespace(src_path=src)),
                                      config={"docs_dir": str(DOCS)}, files=None)

    assert render("benchmarks.md", "the [README](../README.md).") == "the [README](index.md)."
    assert render("tutorials/sb3.md", "[top](../../README.md#quick-start)") == "[top](../index.md#quick-start)"
    assert render("results.md", "in [docs/results/](results/). [env](env.md)") == "in docs/results/. [env](env.md)"
    assert render("results.md", "[gone](missing/)") == "[gone](missing/)"  # not a folder: left for the strict build to report


def test_the_docstring_rewriter_links_roles_converts_rst_tables_and_warns_on_a_missing_target(tmp_path, caplog):
    griffe = pytest.importorskip("griffe", reason="the docs extra (`make setup` installs it)")
    package = tmp_path / "toy"
    package.mkdir()
    (package / "__init__.py").write_text(textwrap.dedent('''
        """Toy package: see :class:`Thing` and :func:`toy.helper`, not :func:`toy.nowhere`.

        ======  ===========
        name    what
        ======  ===========
        Thing   a ``thing``
        ======  ===========

        Example::

            Thing()
        """
        from toy.impl import Thing

        __all__ = ["Thing"]


        def helper():
            """Calls :meth:`~toy.impl.Thing.run`."""
        '''))
    (package / "impl.py").write_text('class Thing:\n    """A thing."""\n\n    def run(self):\n        """Run."""\n')
    rst = _load("docs_rst_markup", DOCS / "_ext" / "rst_markup.py")
    sys.path.insert(0, str(tmp_path))
    try:
        with caplog.at_level(logging.WARNING):
            module = griffe.load("toy", search_paths=[str(tmp_path)], extensions=griffe.load_extensions(rst.RstMarkup(packages=("toy",))))
    finally:
        sys.path.remove(str(tmp_path))
    text = module.docstring.value
    assert '<autoref identifier="toy.impl.Thing" optional><code>Thing</code></autoref>' in text  # resolved through the import
    assert '<autoref identifier="toy.helper" optional>' in text and ":func:" not in text
    assert "| name | what |" in text and "| Thing | a `thing` |" in text and "=====" not in text
    assert "Example:\n" in text and "Example::" not in text
    assert '<autoref identifier="toy.impl.Thing.run" optional><code>run</code></autoref>' in module["helper"].docstring.value
    assert module.members["Thing"].is_public is False  # documented once, where it is defined
    warnings = [record.getMessage() for record in caplog.records]
    assert any("toy.nowhere" in message and "does not exist" in message for message in warnings), warnings
    assert not any("toy.helper" in message or "toy.impl.Thing" in message for message in warnings), warnings
