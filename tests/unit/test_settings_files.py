"""Where the settings file is found, and what its relative paths are relative to."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings.config.settings import Settings, find_settings_file

QUERY = "SELECT id, email FROM customers WHERE (:after IS NULL OR id > :after) LIMIT :limit"


def test_config_option_comes_first(tmp_path: Path) -> None:
    (tmp_path / "tidings.toml").write_text("")
    chosen = find_settings_file("other.toml", env={"TIDINGS_CONFIG": "env.toml"}, cwd=tmp_path)
    assert chosen == Path("other.toml")


def test_the_environment_comes_before_the_working_directory(tmp_path: Path) -> None:
    (tmp_path / "tidings.toml").write_text("")
    assert find_settings_file(env={"TIDINGS_CONFIG": "env.toml"}, cwd=tmp_path) == Path("env.toml")


def test_tidings_toml_in_the_working_directory_is_read_by_default(tmp_path: Path) -> None:
    assert find_settings_file(env={}, cwd=tmp_path) is None
    (tmp_path / "tidings.toml").write_text("")
    assert find_settings_file(env={}, cwd=tmp_path) == tmp_path / "tidings.toml"


def test_relative_paths_resolve_against_the_file_not_the_working_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "conf"
    (folder / "templates").mkdir(parents=True)
    (folder / "tidings.toml").write_text(f'''
store = "sqlite:///data/tidings.db"
[channels.email]
kind = "email"
templates = "templates"
[campaigns.digest]
cron = "0 9 * * 1"
channels = ["email"]
template = "digest"
audience = {{ sql = {{ url = "sqlite:///customers.db", query = "{QUERY}" }} }}
''')
    monkeypatch.chdir(tmp_path)
    settings = Settings.load(Path("conf/tidings.toml"), env={})
    assert settings.store == f"sqlite:///{folder / 'data/tidings.db'}"
    assert settings.channels["email"].templates == str(folder / "templates")
    assert settings.campaigns["digest"].audience["sql"]["url"] == (
        f"sqlite:///{folder / 'customers.db'}")


@given(st.sampled_from(["sqlite:///:memory:", "sqlite:////abs/t.db",
                        "postgresql://u@localhost:5432/db"]))
def test_absolute_in_memory_and_server_urls_are_kept(url: str) -> None:
    from tidings.config.settings import resolve_relative_paths

    data = {"store": url}
    resolve_relative_paths(data, Path("/elsewhere"))
    assert data["store"] == url


def test_the_store_from_the_environment_is_taken_as_given(tmp_path: Path) -> None:
    (tmp_path / "tidings.toml").write_text('store = "sqlite:///a.db"\n')
    settings = Settings.load(tmp_path / "tidings.toml", env={"TIDINGS_STORE": "sqlite:///b.db"})
    assert settings.store == "sqlite:///b.db"


def test_a_file_that_names_no_store_gets_the_default_beside_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "tidings.toml").write_text("[channels.email]\n")
    monkeypatch.chdir(tmp_path)
    settings = Settings.load(Path("conf/tidings.toml"), env={})
    assert settings.store == f"sqlite:///{tmp_path / 'conf' / 'tidings.db'}"
    # No file at all: the default stays relative to where the command runs.
    assert Settings.load(None, env={}).store == "sqlite:///tidings.db"
