"""The README's fenced code blocks, each with its language and the section it is in, for
the tests that run or load them (tests/unit/test_readme.py, and the walkthrough in
tests/acceptance/test_readme_walkthrough.py)."""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"
FIRST_CAMPAIGN = "Your first campaign"
_FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[\w+-]*)[ \t]*$")
_HEADING = re.compile(r"^(#{2,3}) (?P<title>.+)$")


@dataclass(frozen=True)
class Block:
    lang: str
    text: str
    section: str  # the nearest ## heading above it
    line: int     # 1-based line of the opening fence

    @property
    def id(self) -> str:
        return f"{self.lang or 'plain'}@{self.line}"


def blocks(path: Path = README) -> list[Block]:
    found: list[Block] = []
    section = ""
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        heading = _HEADING.match(lines[i])
        if heading and len(heading.group(1)) == 2:
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
                           text=textwrap.dedent("\n".join(body)) + "\n"))
        i += 1
    return found


def of(lang: str, section: str | None = None) -> list[Block]:
    return [b for b in blocks() if b.lang == lang and (section is None or b.section == section)]
