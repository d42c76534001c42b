"""The README's settings examples are real settings: each TOML block parses."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tidings.settings import Settings

README = Path(__file__).resolve().parents[2] / "README.md"
BLOCKS = re.findall(r"```toml\n(.*?)```", README.read_text(), flags=re.DOTALL)


def test_the_readme_has_settings_examples() -> None:
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("block", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_a_readme_settings_block_parses(block: str, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    for name in re.findall(r'_env\s*=\s*"([A-Z_]+)"', block):
        monkeypatch.setenv(name, "set-by-the-test")
    for folder in re.findall(r'templates\s*=\s*"([^"]+)"', block):
        (tmp_path / folder).mkdir(exist_ok=True)
    path = tmp_path / "tidings.toml"
    path.write_text(block)
    Settings.load(path, env={})

