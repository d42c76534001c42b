"""A template variable missing from the data is refused when the intent is made
(``notify``, the publish route, the campaign check), not found at send time: only
variables every message reads, never a guarded, defaulted or conditional one."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tidings.admission.intake import NotifyRequest
from tidings.admission.publish_intake import sendable
from tidings.config.settings import Settings
from tidings.core.clock import FakeClock
from tidings.core.errors import ConfigurationError, InvalidInput
from tidings.core.model import IntentDraft
from tidings.delivery.compose import Composer
from tidings.delivery.template_variables import always_read
from tidings.delivery.templates import RenderError, TemplateSet
from tidings.runtime import build_runtime, campaigns_from, check_campaign_data, load_templates

T0 = 1_786_698_005.0
ENV = TemplateSet.from_mapping({})._text_env  # the environment templates are parsed in

CASES: list[tuple[str, set[str]]] = [
    ("Hello {{ name }}", {"name"}),
    ("{{ order.total }} {{ lines[0] }}", {"order", "lines"}),
    ("{{ 'Dear ' ~ title }}{{ count * 2 }}{{ -balance }}", {"title", "count", "balance"}),
    ("{% if vip %}Gold{% endif %}", {"vip"}),
    ("{% if coupon is defined %}{{ coupon }}{% endif %}", set()),
    ("{% if coupon is not defined %}-{% else %}{{ coupon }}{% endif %}", set()),
    ("{{ nickname | default(name) }}", set()),
    ("{{ nickname | d('friend') | upper }}", set()),
    ("{{ profile.nick | default('x') }}", {"profile"}),
    ("{{ first | upper }}", {"first"}),
    ("{% if kind == 'a' %}{{ a_only }}{% elif kind == 'b' %}{{ b_only }}{% endif %}",
     {"kind"}),
    ("{{ extra if show else plain }}", {"show"}),
    ("{{ left and right }}{{ this or that }}", {"left", "this"}),
    ("{% for item in items %}{{ item.name }} {{ per_item }}{% else %}{{ none_left }}"
     "{% endfor %}", {"items"}),
    ("{% set greeting = salutation %}Hi", set()),
    ("{% set n = 3 %}{{ n }}", set()),
    ("{% with t = total %}{{ t }}{% endwith %}", set()),
    ("{% macro line(x) %}{{ x }} {{ inside }}{% endmacro %}{{ line(arg) }}", set()),
    ("{% filter upper %}{{ shouted }}{% endfilter %}", {"shouted"}),
    ("{% set block %}{{ captured }}{% endset %}", {"captured"}),
    ("{{ maybe is none }}{{ seen in [] }}{{ 'x' in tags }}", {"tags"}),
    ("{{ recipient_id }} {{ range(3) | list }}", set()),  # the renderer's own
]


@pytest.mark.parametrize(("text", "needed"), CASES)
def test_what_every_render_reads(text: str, needed: set[str]) -> None:
    reads = always_read(ENV.parse(text)) - {"recipient_id"} - set(ENV.globals)
    assert reads == needed


VALUES: dict[str, Any] = {
    "name": "Ada", "order": {"total": 3}, "lines": ["l"], "title": "Dr", "count": 2,
    "balance": 5, "vip": True, "first": "ada", "kind": "c", "show": False, "left": 1,
    "right": 2, "this": 0, "that": 1, "total": 4, "items": [], "tags": ["x"],
    "shouted": "hey", "captured": "c",
    "profile": {"nick": "a"}, "plain": "p", "none_left": "n", "arg": "a", "inside": "i",
}


@pytest.mark.parametrize(("text", "needed"), CASES)
def test_a_variable_found_missing_fails_every_render_and_the_rest_renders(
        text: str, needed: set[str]) -> None:
    # Refusing is only ever right: without a variable the rule names, the message fails.
    for name in needed:
        templates = TemplateSet.from_mapping({"t/v1": {"sms.txt": f"x {text}"}})
        data = {k: v for k, v in VALUES.items() if k != name}
        assert templates.unprovided("t/v1", "sms", data) == (name, "sms.txt")
        with pytest.raises(RenderError, match=name):
            templates.render("t/v1", "sms", data, "c1")
    templates = TemplateSet.from_mapping({"t/v1": {"sms.txt": f"x {text}"}})
    assert templates.unprovided("t/v1", "sms", VALUES) is None
    templates.render("t/v1", "sms", VALUES, "c1")


def test_the_first_file_of_the_kind_that_needs_it_is_named_and_read_once() -> None:
    reads: list[str] = []
    files = {"subject.txt": "For {{ name }}", "body.txt": "{{ total }} {{ name }}",
             "body.html": "<p>{{ html_only }}</p>", "sms.txt": "{{ code }}"}

    def source(template_id: str) -> dict[str, str]:
        reads.append(template_id)
        return files

    templates = TemplateSet(source, known_ids=lambda: ["t/v1"])
    assert templates.unprovided("t/v1", "email", {}) == ("name", "subject.txt")
    assert templates.unprovided("t/v1", "email", {"name": 1}) == ("total", "body.txt")
    assert templates.unprovided("t/v1", "email", {"name": 1, "total": 1}) == (
        "html_only", "body.html")
    assert templates.unprovided("t/v1", "sms", {}) == ("code", "sms.txt")
    templates.render("t/v1", "sms", {"code": 7}, "c1")
    assert reads == ["t/v1"]  # parsed once per version, then cached with its reads


def write_templates(root: Path) -> str:
    for template_id, files in {
        "receipt/v1": {"subject.txt": "Receipt {{ order_id }}",
                       "body.txt": "Hello {{ name }}, {% if coupon is defined %}{{ coupon }}"
                                   "{% endif %}{{ note | default('') }}",
                       "sms.txt": "Order {{ order_id }}"},
    }.items():
        folder = root / template_id
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (folder / name).write_text(text)
    return str(root)


def channels(templates: str) -> dict[str, Any]:
    twin = {"kind": "sandbox-twin"}
    return {"email": {"kind": "email", "templates": templates, "provider": twin},
            "sms": {"kind": "sms", "templates": templates, "provider": twin}}


async def test_notify_refuses_a_missing_variable_naming_it_and_the_file(tmp_path: Path) -> None:
    settings = Settings.parse({"store": f"sqlite:///{tmp_path / 't.db'}",
                               "channels": channels(write_templates(tmp_path / "templates"))})
    async with await build_runtime(settings, clock=FakeClock(T0)) as runtime:
        ada = {"id": "c1", "email": "ada@example.com", "phone": "+14155550101"}
        with pytest.raises(InvalidInput) as refused:
            await runtime.notify(key="order-1", recipient=ada, channels=["email"],
                                 template="receipt/v1", data={"order_id": 1})
        assert refused.value.field == "data.name"
        assert "template 'receipt/v1' body.txt uses it in every message" in str(refused.value)
        with pytest.raises(InvalidInput, match=r"^data\.order_id"):
            await runtime.notify(key="order-1", recipient=ada, channels=["sms"],
                                 template="receipt/v1")
        many = [NotifyRequest(key="order-2", recipient=ada, channels=["email"],
                              template="receipt/v1", data={"name": "Ada"})]
        with pytest.raises(InvalidInput, match=r"^data\.order_id"):
            await runtime.notify_many(many)
        assert await runtime.store.intent_counts() == {}

        # The recipient's own fields are data too; guarded and defaulted ones are optional.
        assert await runtime.notify(key="order-3", recipient={**ada, "name": "Ada"},
                                    channels=["email", "sms"], template="receipt/v1",
                                    data={"order_id": 3}) == ["order-3:email", "order-3:sms"]


def test_a_publish_is_refused_naming_the_payloads_data(tmp_path: Path) -> None:
    composer = Composer(store=None, kinds={"email": "email"},  # type: ignore[arg-type]
                        templates={"email": TemplateSet.from_directory(
                            write_templates(tmp_path / "templates"))}, clock=FakeClock(T0))
    draft = IntentDraft(key="q/2026-08-14/c1/email/v1", channel="email", recipient_id="c1",
                        address="ada@example.com", template="receipt/v1",
                        data='{"order_id":1}', due_at=T0)

    with pytest.raises(InvalidInput) as refused:
        sendable(composer.draft_problem, [draft], {}, from_payload=True,
                 template_field="payload.template", where="body.")
    assert refused.value.field == "body.payload.data.name"
    whole = replace(draft, data='{"name":"Ada","order_id":1}')
    assert sendable(composer.draft_problem, [whole], {}, from_payload=True,
                    template_field="payload.template") == [whole]


def campaign_settings(tmp_path: Path, query: str) -> Settings:
    crm = tmp_path / "crm.db"
    with sqlite3.connect(crm) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS c (id TEXT PRIMARY KEY, email TEXT, "
                     "name TEXT, order_id TEXT)")
    return Settings.parse({
        "store": f"sqlite:///{tmp_path / 't.db'}",
        "channels": channels(write_templates(tmp_path / "templates")),
        "campaigns": {"digest": {"cron": "0 9 * * *", "channels": ["email"],
                                 "template": "receipt", "version": 1, "audience": {"sql": {
                                     "url": f"sqlite:///{crm}", "query": query}}}}})


async def test_the_campaign_check_refuses_an_audience_without_a_column_its_template_needs(
        tmp_path: Path) -> None:
    page = " FROM c WHERE (:after IS NULL OR id > :after) ORDER BY id LIMIT :limit"
    lacking = campaign_settings(tmp_path, "SELECT id, email, order_id" + page)
    with pytest.raises(ConfigurationError) as refused:
        await check_campaign_data(lacking, campaigns_from(lacking), load_templates(lacking))
    assert refused.value.field == "campaigns.digest.audience"
    assert "no column 'name'" in refused.value.message and "body.txt" in refused.value.message

    whole = campaign_settings(tmp_path, "SELECT id, email, name, order_id" + page)
    await check_campaign_data(whole, campaigns_from(whole), load_templates(whole))
