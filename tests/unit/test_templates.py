"""Versioned templates rendered at send time: files, errors, sandbox, SMS length."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings.core.errors import ConfigurationError
from tidings.core.model import Content
from tidings.delivery.templates import RenderError, TemplateSet, parse_template_id, sms_length

DIGEST = {
    "subject.txt": "Your digest, {{ name }}\n",
    "body.txt": "Hello {{ name }},\n{% for item in items %}- {{ item.title }}\n{% endfor %}",
    "body.html": "<p>Hello {{ name }}</p><ul>{% for item in items %}<li>{{ item.title }}</li>"
                 "{% endfor %}</ul>",
    "sms.txt": "{{ name }}: {{ items | length }} new items. Ref {{ recipient_id }}\n",
}
DATA = {"name": "Ada & <Bob>", "items": [{"title": "One"}, {"title": "Two"}]}


def one(files: dict[str, str], template_id: str = "t/v1", **kwargs: Any) -> TemplateSet:
    return TemplateSet.from_mapping({template_id: files}, **kwargs)


def render_error(templates: TemplateSet, template_id: str, kind: str,
                 data: dict[str, Any] | None = None, recipient_id: str = "r1") -> RenderError:
    with pytest.raises(RenderError) as raised:
        templates.render(template_id, kind, data if data is not None else {}, recipient_id)
    return raised.value


def write(root: Path, template_id: str, files: dict[str, str]) -> None:
    folder = root / template_id
    folder.mkdir(parents=True)
    for name, text in files.items():
        (folder / name).write_text(text, "utf-8")


# ---------------------------------------------------------------- rendering


def test_email_renders_subject_text_and_autoescaped_html_from_a_directory(
    tmp_path: Path,
) -> None:
    write(tmp_path, "weekly-digest/v3", DIGEST)
    templates = TemplateSet.from_directory(tmp_path)

    content = templates.render("weekly-digest/v3", "email", DATA, "cust_1042")

    assert content == Content(
        subject="Your digest, Ada & <Bob>",
        text="Hello Ada & <Bob>,\n- One\n- Two\n",
        html="<p>Hello Ada &amp; &lt;Bob&gt;</p><ul><li>One</li><li>Two</li></ul>",
    )


def test_sms_renders_its_own_file_with_the_recipient_id() -> None:
    content = one(DIGEST).render("t/v1", "sms", DATA, "cust_1042")

    assert content == Content(text="Ada & <Bob>: 2 new items. Ref cust_1042")


def test_the_intents_recipient_id_wins_over_a_data_key_of_that_name() -> None:
    templates = one({"sms.txt": "{{ recipient_id }}"})

    assert templates.render("t/v1", "sms", {"recipient_id": "forged"}, "real").text == "real"


def test_an_email_template_without_html_sends_text_only() -> None:
    templates = one({"subject.txt": "Hi", "body.txt": "Body"})

    assert templates.render("t/v1", "email", {}, "r1") == Content(subject="Hi", text="Body")


def test_versions_are_separate_templates() -> None:
    templates = TemplateSet.from_mapping({"t/v1": {"sms.txt": "old"}, "t/v2": {"sms.txt": "new"}})

    assert templates.render("t/v1", "sms", {}, "r").text == "old"
    assert templates.render("t/v2", "sms", {}, "r").text == "new"


def test_a_version_is_read_once_and_a_new_version_is_found_without_a_restart(
    tmp_path: Path,
) -> None:
    write(tmp_path, "t/v1", {"sms.txt": "first"})
    templates = TemplateSet.from_directory(tmp_path)
    assert templates.render("t/v1", "sms", {}, "r").text == "first"

    (tmp_path / "t" / "v1" / "sms.txt").write_text("edited in place", "utf-8")
    assert render_error(templates, "t/v2", "sms").kind == "unknown_template"
    write(tmp_path, "t/v2", {"sms.txt": "second"})

    assert templates.render("t/v1", "sms", {}, "r").text == "first"
    assert templates.render("t/v2", "sms", {}, "r").text == "second"


# ---------------------------------------------------------------- failures


@pytest.mark.parametrize("template_id", ["weekly-digest", "weekly-digest/3", "a/v0", "/v1",
                                         "../x/v1", "a/b/v1", "a/v1/", ""])
def test_a_template_id_without_a_version_segment_is_refused_by_name(template_id: str) -> None:
    error = render_error(one(DIGEST), template_id, "sms")

    assert error.kind == "bad_id"
    assert repr(template_id) in error.reason and "vN" in error.reason


def test_parse_template_id_splits_name_and_version() -> None:
    assert parse_template_id("weekly-digest/v12") == ("weekly-digest", 12)


def test_an_unknown_template_names_its_id() -> None:
    error = render_error(one(DIGEST), "other/v1", "email")

    assert (error.kind, error.reason) == ("unknown_template", "template 'other/v1' not found")


def test_a_missing_variable_is_an_error_naming_it() -> None:
    error = render_error(one(DIGEST), "t/v1", "email", {"items": []})

    assert error.kind == "undefined"
    assert error.reason == "template 't/v1' subject.txt: undefined variable 'name'"


def test_a_missing_attribute_is_an_error_too() -> None:
    error = render_error(one(DIGEST), "t/v1", "email", {"name": "x", "items": [{"t": 1}]})

    assert error.kind == "undefined"
    assert error.reason == "template 't/v1' body.txt: dict has no attribute or key 'title'"


def test_a_syntax_error_names_the_file_and_line_and_is_compiled_once() -> None:
    templates = one({"sms.txt": "line one\n{% if %}"})

    first = render_error(templates, "t/v1", "sms")
    second = render_error(templates, "t/v1", "sms")

    assert first.kind == "syntax"
    assert first.reason.startswith("template 't/v1' sms.txt: syntax error on line 2")
    assert second.reason == first.reason and second is not first


@pytest.mark.parametrize("source", [
    "{{ name.__class__.__mro__ }}",
    "{{ items.append(1) }}",
    "{{ name | attr('__init__') }}",
])
def test_the_sandbox_blocks_unsafe_access_and_mutation(source: str) -> None:
    error = render_error(one({"sms.txt": source}), "t/v1", "sms", DATA)

    assert error.kind == "security"
    assert error.reason.startswith("template 't/v1' sms.txt: blocked by the sandbox")


@pytest.mark.parametrize("text", ["{% include 'footer.txt' %}",
                                  "{% extends '../../etc/passwd' %}",
                                  "{% import 'macros.txt' as m %}"])
def test_a_version_cannot_include_another_template(text: str) -> None:
    # found when the version is compiled (at start-up for a campaign's), not per send
    templates = one({"sms.txt": text})
    assert [e.kind for e in templates.compile_all()] == ["syntax"]
    error = render_error(templates, "t/v1", "sms")

    assert error.kind == "syntax" and "self-contained" in error.reason


@pytest.mark.parametrize(("files", "kind", "says"), [
    ({"sms.txt": "x"}, "email", "subject.txt: missing, and email needs it"),
    ({"subject.txt": "s", "body.txt": "b"}, "sms", "sms.txt: missing, and sms needs it"),
    ({"subject.txt": "s", "body.txt": "b"}, "email", None),
])
def test_a_version_missing_a_file_its_kind_needs_is_found_before_any_send(
        files: dict[str, str], kind: str, says: str | None) -> None:
    found = one(files).missing("t/v1", kind)
    assert (found is None) if says is None else (found is not None and says in found)


def test_other_runtime_failures_name_only_the_exception_type() -> None:
    error = render_error(one({"sms.txt": "{{ n / 0 }}"}), "t/v1", "sms", {"n": 5})

    assert error.reason == "template 't/v1' sms.txt: rendering failed (ZeroDivisionError)"


@pytest.mark.parametrize(("files", "kind", "says"), [
    ({"sms.txt": "x"}, "email", "subject.txt: missing, and email needs it"),
    ({"subject.txt": "s", "sms.txt": "x"}, "email", "body.txt: missing, and email needs it"),
    ({"subject.txt": "s", "body.txt": "b"}, "sms", "sms.txt: missing, and sms needs it"),
])
def test_a_file_the_channel_needs_is_required(files: dict[str, str], kind: str,
                                              says: str) -> None:
    error = render_error(one(files), "t/v1", kind)

    assert error.kind == "missing_file" and error.reason == f"template 't/v1' {says}"


@pytest.mark.parametrize(("subject", "kind"), [
    ("{{ a }}\n{{ b }}", "invalid"), ("  \n", "empty"), ("x" * 999, "too_long"),
])
def test_an_email_subject_is_one_non_empty_line(subject: str, kind: str) -> None:
    templates = one({"subject.txt": subject, "body.txt": "b"})

    assert render_error(templates, "t/v1", "email", {"a": 1, "b": 2}).kind == kind


def test_an_empty_body_or_sms_is_an_error() -> None:
    assert render_error(one({"subject.txt": "s", "body.txt": "{{ '' }}"}), "t/v1",
                        "email").kind == "empty"
    assert render_error(one({"sms.txt": "  "}), "t/v1", "sms").kind == "empty"


def test_data_must_be_an_object_with_text_keys() -> None:
    templates = one({"sms.txt": "x"})

    assert render_error(templates, "t/v1", "sms", [1, 2]).kind == "bad_data"  # type: ignore[arg-type]
    assert render_error(templates, "t/v1", "sms", {1: "x"}).kind == "bad_data"  # type: ignore[dict-item]


def test_an_unknown_channel_kind_is_a_render_error() -> None:
    assert render_error(one(DIGEST), "t/v1", "push").kind == "bad_id"


SECRET = "alice.smith@example.com"
LEAKY = [
    "{{ m[k] }}",  # the missing key is a data value
    "{{ k | attr(k) }}",  # the blocked attribute name is a data value
    "{{ k + 1 }}",
    "{{ k | int + n.missing }}",
    "{{ nope(k) }}",
    "{% for x in k %}{{ m[x ~ k] }}{% endfor %}",
]


@pytest.mark.parametrize("source", LEAKY)
# A secret that names a method of str ("replace") makes ``k | attr(k)`` render, not fail;
# one that names a method of dict ("keys") makes ``m[k]`` render (Jinja falls back to the
# attribute).
@given(secret=st.text(min_size=2, max_size=40).filter(
    lambda s: not s.isspace() and not hasattr(str, s) and not hasattr(dict, s)))
def test_a_reason_never_contains_a_data_value(source: str, secret: str) -> None:
    templates = one({"sms.txt": source})

    error = render_error(templates, "t/v1", "sms", {"m": {}, "k": secret, "n": {"v": secret}},
                         recipient_id=secret)

    detail = error.reason.removeprefix("template 't/v1' sms.txt: ")
    assert secret not in detail and repr(secret)[1:-1] not in detail


def test_a_reason_hides_a_realistic_value() -> None:
    error = render_error(one({"sms.txt": "{{ m[k] }}"}), "t/v1", "sms", {"m": {}, "k": SECRET})

    assert SECRET not in error.reason
    assert error.reason == "template 't/v1' sms.txt: dict has no attribute or key '…'"


# ---------------------------------------------------------------- construction


def test_from_mapping_refuses_bad_ids_and_unknown_files() -> None:
    with pytest.raises(ConfigurationError, match="NAME/vN"):
        TemplateSet.from_mapping({"digest": {"sms.txt": "x"}})
    with pytest.raises(ConfigurationError, match=r"body\.md"):
        TemplateSet.from_mapping({"digest/v1": {"body.md": "x"}})
    with pytest.raises(ConfigurationError, match="max_sms_segments"):
        TemplateSet.from_mapping({}, max_sms_segments=0)


def test_from_directory_needs_a_directory(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="not a directory"):
        TemplateSet.from_directory(tmp_path / "absent")


def test_compile_all_reports_every_broken_file(tmp_path: Path) -> None:
    write(tmp_path, "good/v1", DIGEST)
    write(tmp_path, "bad/v1", {"subject.txt": "{{ x", "body.txt": "{% endif %}"})
    write(tmp_path, "bad/v2", {"sms.txt": "fine"})
    (tmp_path / "notes").mkdir()

    failures = TemplateSet.from_directory(tmp_path).compile_all()

    assert sorted(f.reason.split(":")[0] for f in failures) == [
        "template 'bad/v1' body.txt", "template 'bad/v1' subject.txt"]


# ---------------------------------------------------------------- SMS length


@pytest.mark.parametrize(("text", "encoding", "units", "segments"), [
    ("", "GSM-7", 0, 0),
    ("a" * 160, "GSM-7", 160, 1),
    ("a" * 161, "GSM-7", 161, 2),
    ("a" * 306, "GSM-7", 306, 2),
    ("a" * 307, "GSM-7", 307, 3),
    ("€" * 80, "GSM-7", 160, 1),  # extension characters take two septets
    ("a" * 152 + "€" + "a" * 152, "GSM-7", 306, 3),  # ...that never straddle two segments
    ("Grüße, Ñandù! £5 @ 9:00", "GSM-7", 23, 1),
    ("Grüße, Ñandú!", "UCS-2", 13, 1),  # ú is not in GSM-7 (ù is)
    ("й" * 70, "UCS-2", 70, 1),
    ("й" * 71, "UCS-2", 71, 2),
    ("😀" * 35, "UCS-2", 70, 1),
    ("a" + "😀" * 34, "UCS-2", 69, 1),
    ("a" * 66 + "😀" + "a" * 66, "UCS-2", 134, 3),  # a surrogate pair is never split
])
def test_sms_segments_follow_gsm7_and_ucs2_rules(text: str, encoding: str, units: int,
                                                 segments: int) -> None:
    length = sms_length(text)

    assert (length.encoding, length.units, length.segments) == (encoding, units, segments)


def test_an_sms_past_the_segment_limit_is_an_error_naming_the_count() -> None:
    templates = one({"sms.txt": "{{ 'x' * n }}"}, max_sms_segments=2)

    assert templates.render("t/v1", "sms", {"n": 306}, "r").text == "x" * 306
    error = render_error(templates, "t/v1", "sms", {"n": 307})
    assert error.kind == "too_long"
    assert error.reason == ("template 't/v1' sms.txt: renders to 3 GSM-7 segments "
                            "(307 units), the limit is 2")


def test_the_default_limit_is_four_segments() -> None:
    templates = one({"sms.txt": "{{ 'й' * n }}"})

    templates.render("t/v1", "sms", {"n": 4 * 67}, "r")
    assert render_error(templates, "t/v1", "sms", {"n": 4 * 67 + 1}).kind == "too_long"


@pytest.mark.parametrize(("body", "says"), [
    ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
     "took more than 1 s"),
    ("{{ n ** n ** n }}", "computes a number of more than 4096 bits"),
    ("{{ 'x' * n }}", "repeats past 1,000,000 characters"),
    ("{{ 'x' * 10**9 }}", "repeats past 1,000,000 characters"),
    ("{% for i in range(100000) %}{{ 'abcdefghij' * 2 }}{% endfor %}",
     "renders past 1,000,000 characters"),
])
def test_a_template_that_would_run_or_grow_without_end_is_rejected_within_budget(
        body: str, says: str) -> None:
    # one template author must not hold a worker (its loop, its leases, SIGTERM) for
    # good, nor build a gigabyte for the provider
    ts = TemplateSet.from_mapping({"t/v1": {"subject.txt": "Hi", "body.txt": body}})
    with pytest.raises(RenderError) as caught:
        ts.render("t/v1", "email", {"n": 10**9}, "r1")
    assert caught.value.kind == "too_long" and says in caught.value.reason
    fine = TemplateSet.from_mapping({"t/v1": {"subject.txt": "Hi {{ 2 ** 10 }}",
                                              "body.txt": "{{ 'ab' * 3 }} {{ range(3)|list }}"}})
    content = fine.render("t/v1", "email", {}, "r1")
    assert (content.subject, content.text) == ("Hi 1024", "ababab [0, 1, 2]")


def test_a_version_read_while_it_is_copied_is_read_again(tmp_path: Path) -> None:
    version = tmp_path / "t" / "v2"
    version.mkdir(parents=True)
    (version / "subject.txt").write_text("Hi")
    ts = TemplateSet.from_directory(tmp_path)
    with pytest.raises(RenderError, match=r"body\.txt: missing"):
        ts.render("t/v2", "email", {}, "r1")
    (version / "body.txt").write_text("Body")  # the copy finishes
    assert ts.render("t/v2", "email", {}, "r1").text == "Body"


@pytest.mark.parametrize("value", ["Ann\u2028Bcc: e@x.test", "A\x00B", "A\x0cB", "A\x85B",
                                   "A\x1bB"])
def test_a_subject_rendering_a_control_or_line_break_character_is_refused(value: str) -> None:
    ts = TemplateSet.from_mapping({"t/v1": {"subject.txt": "Hi {{ x }}", "body.txt": "b"}})
    with pytest.raises(RenderError) as caught:
        ts.render("t/v1", "email", {"x": value}, "r1")
    assert caught.value.kind == "invalid"
    assert ts.render("t/v1", "email", {"x": "Ünï\t🎉"}, "r1").subject == "Hi Ünï\t🎉"
