"""The fenced code blocks of the README and of every page of the documentation site,
each with its page, language and the section it is in, for the tests that run or load
them (tests/unit/test_readme.py, and the walkthrough in
tests/acceptance/test_readme_walkthrough.py)."""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
#: The tutorial the README's "Your first campaign" is the short form of.
TUTORIAL = DOCS / "first-campaign.md"
FIRST_CAMPAIGN = "Your first campaign"
_FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[\w+-]*)[ \t]*$")
_HEADING = re.compile(r"^(#{1,3}) (?P<title>.+)$")


@dataclass(frozen=True)
class Block:
    lang: str
    text: str
    section: str  # the nearest ## heading above it (the page's # title before any)
    line: int     # 1-based line of the opening fence
    page: str     # the file, relative to the repository: README.md, docs/…

    @property
    def id(self) -> str:
        return f"{self.page}:{self.lang or 'plain'}@{self.line}"


def pages() -> list[Path]:
    """The README and every page of the site (docs/, generated pages included)."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def blocks(path: Path = README) -> list[Block]:
    found: list[Block] = []
    section = ""
    page = path.relative_to(ROOT).as_posix()
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        heading = _HEADING.match(lines[i])
        if heading and len(heading.group(1)) <= 2:
            section = heading.group("title").strip()
        fence = _FENCE.match(lines[i])
        if fence is None:
            i += 1
            continue
        start, body = i, []
        i += 1
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i])
            i += 1
        found.append(Block(lang=fence.group("lang"), section=section, line=start + 1,
                           text=textwrap.dedent("\n".join(body)) + "\n", page=page))
        i += 1
    return found


def every_block() -> list[Block]:
    return [b for path in pages() for b in blocks(path)]


def of(lang: str, section: str | None = None, page: Path | None = None) -> list[Block]:
    """Blocks in ``lang`` on every page (or on ``page``), in ``section`` if given."""
    found = blocks(page) if page is not None else every_block()
    return [b for b in found if b.lang == lang and (section is None or b.section == section)]


def first_campaign(page: Path) -> list[Block]:
    """The ``sh`` blocks of a first-campaign walk: the README's section, or the whole
    tutorial page."""
    return of("sh", FIRST_CAMPAIGN if page == README else None, page)


def section_text(page: Path, heading: str) -> str:
    """The text under ``heading`` (a line of the page, e.g. ``### Signing a trigger``) up
    to the next heading of its level or above."""
    level = len(heading) - len(heading.lstrip("#"))
    lines = page.read_text().splitlines()
    start = lines.index(heading) + 1
    fenced = False
    for end in range(start, len(lines)):
        fenced ^= bool(_FENCE.match(lines[end]))
        found = _HEADING.match(lines[end])
        if found and not fenced and len(found.group(1)) <= level:
            return "\n".join(lines[start:end]) + "\n"
    return "\n".join(lines[start:]) + "\n"
