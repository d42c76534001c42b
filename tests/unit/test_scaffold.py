"""``tidings init``'s folder is a working project: its settings load, its templates
compile and its audience pages, wherever the folder is read from."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidings.admission.audience import audience_from_spec
from tidings.cli.scaffold import CAMPAIGN, describe, write_starter
from tidings.config.settings import Settings
from tidings.core.errors import InvalidInput
from tidings.runtime import campaigns_from, load_templates


async def test_the_starter_settings_load_and_the_audience_pages(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    starter = write_starter(tmp_path / "project", sandbox_port=18025)
    monkeypatch.chdir(tmp_path)  # read from outside the folder: paths are the file's
    settings = Settings.load(starter.folder / "tidings.toml", env={})

    assert set(settings.channels) == {"email", "sms"}
    assert settings.store == f"sqlite:///{(tmp_path / 'project/tidings.db').resolve()}"
    assert settings.channels["email"].provider.url == "http://127.0.0.1:18025"  # type: ignore[union-attr]
    assert set(load_templates(settings)) == {"email", "sms"}
    [campaign] = campaigns_from(settings)
    assert campaign.name == CAMPAIGN
    members = await audience_from_spec(settings.campaigns[CAMPAIGN].audience).page(None, 10)
    assert [(m.id, m.active, m.data["name"]) for m in members] == [
        ("cust_001", True, "Ada"), ("cust_002", True, "Grace"), ("cust_003", False, "Alan")]


def test_the_next_commands_are_printed_one_a_line(tmp_path: Path) -> None:
    starter = write_starter(tmp_path)
    text = describe(starter, cwd=tmp_path)
    assert starter.commands == ("tidings sandbox", "tidings scheduler",
                                "tidings worker --channel email")
    for command in starter.commands:
        assert f"\n  {command} " in text
    assert "cd " not in text
    assert f"after `cd {tmp_path}`" in describe(starter, cwd=tmp_path.parent.parent)


@pytest.mark.parametrize("port", [0, 65536])
def test_a_port_out_of_range_is_refused_naming_the_option(tmp_path: Path, port: int) -> None:
    with pytest.raises(InvalidInput) as raised:
        write_starter(tmp_path, sandbox_port=port)
    assert raised.value.field == "sandbox_port"
    assert not (tmp_path / "tidings.toml").exists()
