"""docs/settings.md is generated from the settings models and kept current: every field,
its default and its meaning."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidings.config import reference as settings_reference
from tidings.config.settings import Settings

PAGE = Path(__file__).resolve().parents[2] / "docs" / "settings.md"


def test_the_settings_reference_is_current() -> None:
    assert PAGE.read_text() == settings_reference.render(), (
        "docs/settings.md is not current: run "
        "`python -m tidings.config.reference docs/settings.md`")


def test_every_field_of_every_table_has_a_row() -> None:
    page = settings_reference.render()
    for section in settings_reference.sections():
        for name in section.model.model_fields:
            assert f"| `{name}` |" in page, f"{section.path or 'top level'}.{name}"
    assert "## `[api.queues.<name>]`" in page
    assert "`clock_offset_s`" in page


def test_a_field_without_a_meaning_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    notes = dict(settings_reference.NOTES)
    del notes["ApiSettings.host"]
    monkeypatch.setattr(settings_reference, "NOTES", notes)
    with pytest.raises(settings_reference.Undocumented, match=r"ApiSettings\.host"):
        settings_reference.render()


def test_the_defaults_shown_are_the_models_defaults() -> None:
    page = settings_reference.render()
    defaults = Settings()
    assert f"| `paused_retry_after_s` | number | `{defaults.api.paused_retry_after_s:g}` |" in page
    assert f'| `store` | string | `"{defaults.store}"` |' in page


def test_every_note_names_a_field_that_exists() -> None:
    fields = {f"{s.model.__name__}.{name}" for s in settings_reference.sections()
              for name in s.model.model_fields}
    assert set(settings_reference.NOTES) <= fields
