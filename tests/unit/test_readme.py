"""The README's examples are real: each TOML block parses, and the worked trigger
signature is what tidings computes (and what its one-liners print)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tidings.api import sign
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



SIGNING = README.read_text().partition("### Signing a trigger")[2].partition("\n## ")[0]


def test_the_worked_signature_example_is_what_tidings_computes() -> None:
    [header] = re.findall(r"X-Tidings-Signature: (sha256=[0-9a-f]{64})", SIGNING)

    assert header == sign("example-secret", timestamp=1786698000, method="POST",
                          target="/v1/trigger/weekly-digest", body=b"")


def test_the_readme_one_liners_reproduce_the_worked_example() -> None:
    [digest] = re.findall(r"sha256=([0-9a-f]{64})", SIGNING)
    [python] = re.findall(r"^python3 -c '(.+)'$", SIGNING, flags=re.MULTILINE)
    ran = subprocess.run([sys.executable, "-c", python], capture_output=True, text=True,
                         check=True, timeout=30)
    assert ran.stdout.strip() == digest

    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed: the shell line is not checked")
    [shell] = re.findall(r"^sig=\$\((.+)\)$", SIGNING, flags=re.MULTILINE)
    example = {"secret": "example-secret", "ts": "1786698000",
               "path": "/v1/trigger/weekly-digest", "body": ""}
    ran = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, check=True,
                         timeout=30, env={"PATH": os.environ["PATH"], **example})
    assert ran.stdout.strip() == digest
