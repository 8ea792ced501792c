"""A Griffe extension for the API reference (mkdocs.yml): our docstrings mix Google sections (Args:, Returns:)
with reStructuredText markup that Markdown does not know. Before mkdocstrings renders them, this rewrites

* ``:func:`name```, ``:class:`~pkg.mod.Name```, ``:mod:``, ``:meth:``, ``:data:``, ``:attr:`` ... into a code
  span that links to the object when the site documents it (an *optional* autoref: an object the site does
  not render, e.g. a third-party class, stays plain code and is not a broken link);
* RST simple tables (``=====  =====`` borders) into Markdown tables;
* RST bullet lists (``* item`` with 2-space continuation lines, no blank line before the list) into
  Markdown's (4-space continuation, a blank line before each item);
* ``Example::`` (an RST literal-block marker) into ``Example:``;
* a package's re-export of its own objects (``from mara_agents.protocols import Agent`` in ``mara_agents``,
  listed in ``__all__``) into a non-public name: the object is documented once, where it is defined;
* a module docstring that is a whole documentation page (it starts with a Markdown ``# `` heading, as
  ``core_env.discrete_core_v1``'s is docs/env.md) into one line: the API page links to that page instead.

Only the rendered site sees these rewrites; the source docstrings are not changed.
"""

from __future__ import annotations

import html
import re
from typing import Any

import griffe

logger = griffe.logger

ROLE = re.compile(r":(?:py:)?(?:func|class|mod|meth|data|attr|obj|exc|const|type):`([^`]+)`")
BORDER = re.compile(r"^( *)(=+)((?: +=+)+) *$")


def _target(obj: griffe.Object, text: str) -> tuple[str, str]:
    """(identifier, shown text) of one role's content: ``name``, ``~a.b.name`` or ``title <a.b.name>``."""
    explicit = re.fullmatch(r"(.*?)\s*<([^>]+)>", text)
    if explicit:
        shown, name = explicit.group(1), explicit.group(2)
    else:
        name = text
        shown = text.lstrip("~").rsplit(".", 1)[-1] if text.startswith("~") else text
    name = name.lstrip("~").lstrip(".").removesuffix("()")
    head, _, rest = name.partition(".")
    try:
        resolved = obj.resolve(head)  # a name in the object's scope: its members, its module's names and imports
    except Exception:  # noqa: BLE001 - not resolvable here: use the name as written (absolute paths)
        return name, shown
    return (f"{resolved}.{rest}" if rest else resolved), shown


def _roles(obj: griffe.Object, text: str, found: list[tuple[str, griffe.Object]]) -> str:
    def link(match: re.Match[str]) -> str:
        identifier, shown = _target(obj, match.group(1))
        found.append((identifier, obj))
        return (f'<autoref identifier="{html.escape(identifier)}" optional>'
                f"<code>{html.escape(shown)}</code></autoref>")

    return ROLE.sub(link, text)


def _cell(text: str) -> str:
    return re.sub(r"``([^`]+)``", r"`\1`", text.strip()).replace("|", r"\|")


def _tables(text: str) -> str:
    """Each RST simple table (border, header, border, rows, border) as a Markdown table."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        border = BORDER.match(lines[i])
        closes = [j for j in range(i + 1, len(lines)) if lines[j].strip() == lines[i].strip()] if border else []
        if not border or len(closes) < 2:
            out.append(lines[i])
            i += 1
            continue
        starts = [m.start() for m in re.finditer(r"=+", lines[i])]
        cuts = [*starts[1:], None]

        def cells(line: str) -> list[str]:
            return [_cell(line[a:b]) for a, b in zip(starts, cuts)]

        header = [cells(lines[k]) for k in range(i + 1, closes[0])]
        rows = [cells(lines[k]) for k in range(closes[0] + 1, closes[1]) if lines[k].strip()]
        head = [" ".join(column).strip() for column in zip(*header)]
        out += ["", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        out += ["| " + " | ".join(row) + " |" for row in rows]
        out.append("")
        i = closes[1] + 1
    return "\n".join(out)


def _lists(text: str) -> str:
    out: list[str] = []
    in_item = False
    for line in text.split("\n"):
        if re.match(r"[*-] \S", line):
            if out and out[-1].strip():
                out.append("")  # Markdown starts a list, or an item after a continuation paragraph, after a blank line
            in_item = True
        elif in_item and line.startswith("  ") and not line.startswith("    "):
            line = "  " + line  # an RST continuation line (2 spaces) is Markdown's with 4
        elif line.strip() and not line.startswith("  "):
            in_item = False
        out.append(line)
    return "\n".join(out)


class RstMarkup(griffe.Extension):
    """Rewrites the RST markup of every docstring of our packages (see the module docstring) and warns (a
    failure under ``mkdocs build --strict``) where a role names an object of these packages that does not exist."""

    def __init__(self, packages: tuple[str, ...] = ("core_env", "mara_agents", "benchmarks")) -> None:
        super().__init__()
        self.packages = tuple(packages)
        self.loaded: dict[str, griffe.Module] = {}
        self.pending: list[tuple[str, griffe.Object]] = []

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        if pkg.name not in self.packages:
            return
        self.loaded[pkg.name] = pkg
        self._walk(pkg, set())
        still = []
        for identifier, where in self.pending:
            top = identifier.split(".")[0]
            if top not in self.loaded:
                if top in self.packages:
                    still.append((identifier, where))  # checked when its package loads
                continue
            if not _exists(self.loaded[top], identifier):
                location = f"{where.relative_filepath}:{where.docstring.lineno if where.docstring else where.lineno}"
                logger.warning("%s: %s's docstring names %s, which does not exist", location, where.path, identifier)
        self.pending = still

    def _walk(self, obj: griffe.Object, seen: set[str]) -> None:
        if obj.path in seen:
            return
        seen.add(obj.path)
        if obj.docstring is not None:
            value = obj.docstring.value
            if obj.is_module and value.lstrip().startswith("# "):
                value = "Its docstring is a whole documentation page of this site, linked above."
            value = re.sub(r"(?m)(\S)::[ \t]*$", r"\1:", value)
            obj.docstring.value = _roles(obj, _lists(_tables(value)), self.pending)
        for member in obj.members.values():
            if not member.is_alias:
                self._walk(member, seen)
            elif obj.is_module and member.target_path.split(".")[0] == obj.path.split(".")[0]:
                member.public = False


def _exists(pkg: griffe.Module, identifier: str) -> bool:
    """Whether ``identifier`` (``pkg.mod.Class.member``) names an object of ``pkg``, following imports."""
    obj: Any = pkg
    for part in identifier.split(".")[1:]:
        try:
            obj = obj.all_members[part] if obj.is_class else obj.members[part]
            while obj.is_alias and obj.target_path.split(".")[0] == pkg.name:
                obj = obj.target
        except Exception:  # noqa: BLE001 - missing member, or an import from elsewhere
            return False
    return True
