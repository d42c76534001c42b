"""``tidings suppression ...`` as an operator runs it, real processes on both stores:
add, list, remove (audited, its history shown), import and export as CSV (an export
imports again to the same list; a bad row refuses the file naming its line and
column, and nothing is stored), every command but export with ``--json``, and the
help each command gives."""

from __future__ import annotations

import csv
import io
import json
import subprocess
from pathlib import Path

import pytest

from support.cli_process import TIDINGS, migrated, ok_json, run


@pytest.fixture(params=["sqlite", "postgresql"])
def config(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """A settings file with email and sms channels, on a migrated store."""
    if request.param == "sqlite":
        store = f"sqlite:///{tmp_path / 'ops.db'}"
    else:
        store = request.getfixturevalue("pg_url")
    path = tmp_path / "tidings.toml"
    path.write_text(f'''
store = "{store}"
[channels.email]
provider = {{ kind = "sandbox-twin" }}
[channels.sms]
provider = {{ kind = "sandbox-twin" }}
''')
    migrated(path)
    return path


def suppression(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run("suppression", *args, "--config", str(config))


def as_json(config: Path, *args: str) -> dict[str, object]:
    result: dict[str, object] = ok_json("suppression", *args, "--config", str(config))
    return result


def listed(config: Path, *args: str) -> list[tuple[str, str, str]]:
    rows = as_json(config, "list", *args)["suppressions"]
    assert isinstance(rows, list)
    return [(r["address"], r["kind"], r["reason"]) for r in rows]


def test_add_list_remove_and_the_history_of_it(config: Path) -> None:
    added = as_json(config, "add", "email", "Foo@Example.COM ", "--by", "alice",
                    "--note", "asked on the phone")
    again = as_json(config, "add", "email", "foo@example.com", "--reason", "complaint")
    phone = as_json(config, "add", "sms", "+1 (555) 000-1234", "--reason", "sms_stop")

    assert added == {"address": "foo@example.com", "kind": "email", "added": True,
                     "by": "alice"}
    assert again["added"] is False and str(again["by"]).startswith("cli:")
    assert phone["address"] == "+15550001234"
    assert listed(config) == [("+15550001234", "sms", "sms_stop"),
                              ("foo@example.com", "email", "manual")]
    assert listed(config, "--kind", "sms") == [("+15550001234", "sms", "sms_stop")]
    assert listed(config, "--after", "+1 (555) 000-1234") == [("foo@example.com", "email",
                                                          "manual")]
    table = suppression(config, "list")
    assert table.returncode == 0 and "foo@example.com" in table.stdout
    assert "sms_stop" in table.stdout

    removed = as_json(config, "remove", "email", "FOO@example.com", "--by", "bob",
                      "--note", "ticket 4411")
    history = as_json(config, "history", "email", "foo@EXAMPLE.com")
    text = suppression(config, "history", "email", "foo@example.com")

    assert removed["removed"] == {"address": "foo@example.com", "kind": "email",
                                  "reason": "manual", "source": "operator:alice",
                                  "created_at": removed["removed"]["created_at"],  # type: ignore[index]
                                  "key": None, "detail": "asked on the phone"}
    assert history["entry"] is None
    events = history["events"]
    assert isinstance(events, list)
    assert [(e["type"], e["by"]) for e in events] == [("suppression_added", "alice"),
                                                      ("suppression_removed", "bob")]
    assert events[1]["detail"] == "was manual from operator:alice: ticket 4411"
    assert events[0]["at"] <= events[1]["at"]
    assert "is not suppressed" in text.stdout and "ticket 4411" in text.stdout
    assert listed(config) == [("+15550001234", "sms", "sms_stop")]
    nothing = suppression(config, "remove", "email", "foo@example.com", "--by", "bob")
    assert nothing.returncode == 0 and "was not suppressed" in nothing.stdout


def test_bad_input_is_refused_naming_the_argument(config: Path) -> None:
    for args, where in ((("add", "sms", "555-0001234"), "address"),
                        (("add", "fax", "a@example.com"), "kind"),
                        (("add", "email", "a@example.com", "--reason", "because"), "reason"),
                        (("list", "--limit", "0"), "limit"),
                        (("list", "--kind", "fax"), "kind"),
                        (("history", "email", "not an address"), "address")):
        refused = suppression(config, *args)
        assert refused.returncode == 2, (args, refused.stderr)
        assert f"error: {where}:" in refused.stderr, (args, refused.stderr)
        assert "Traceback" not in refused.stderr
    assert listed(config) == []


def test_an_export_imports_again_to_the_same_list(tmp_path: Path, config: Path) -> None:
    source = tmp_path / "in.csv"
    source.write_text("address,kind,reason,note\n"
                      "ann@example.com,email,hard_bounce,\"bounced, twice\"\n"
                      "+15550002222,sms,sms_stop,\n"
                      "Bob@Example.com,email,,\n"
                      "bob@example.com,email,complaint,\n")

    imported = as_json(config, "import", str(source), "--by", "ops")
    exported = tmp_path / "out.csv"
    wrote = suppression(config, "export", "-o", str(exported))
    to_stdout = suppression(config, "export")
    only_email = suppression(config, "export", "--kind", "email", "--reason", "manual")

    assert imported == {"rows": 4, "added": 3, "already": 1}
    assert wrote.returncode == 0 and wrote.stdout == ""
    assert to_stdout.stdout == exported.read_text()
    rows = list(csv.DictReader(io.StringIO(exported.read_text())))
    assert [(r["address"], r["kind"], r["reason"], r["source"], r["detail"]) for r in rows] == [
        ("+15550002222", "sms", "sms_stop", "operator:ops (import)", ""),
        ("ann@example.com", "email", "hard_bounce", "operator:ops (import)", "bounced, twice"),
        ("bob@example.com", "email", "manual", "operator:ops (import)", "")]
    assert [r["address"] for r in csv.DictReader(io.StringIO(only_email.stdout))] == [
        "bob@example.com"]

    # The export, into an empty store, from standard input: the same list.
    other = tmp_path / "other.toml"
    other.write_text(config.read_text().replace(
        config.read_text().splitlines()[1], f'store = "sqlite:///{tmp_path / "other.db"}"'))
    assert run("db", "migrate", "--config", str(other)).returncode == 0
    again = subprocess.run([*TIDINGS, "suppression", "import", "-", "--json", "--config",
                            str(other)], input=exported.read_text(), capture_output=True,
                           text=True, timeout=60, check=False)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) == {"rows": 3, "added": 3, "already": 0}
    assert listed(other) == listed(config)
    assert as_json(config, "import", str(exported)) == {"rows": 3, "added": 0, "already": 3}


def test_one_bad_row_refuses_the_file_and_stores_nothing(tmp_path: Path,
                                                         config: Path) -> None:
    as_json(config, "add", "email", "kept@example.com", "--reason", "complaint")
    bad = tmp_path / "bad.csv"
    bad.write_text("address,kind\n"
                   "one@example.com,email\n"
                   "two@example.com,email\n"
                   "not-a-phone,sms\n"
                   "three@example.com,email\n")
    huge = tmp_path / "huge.csv"
    huge.write_text("address,kind\nok@example.com,email\n\"" + "a" * 200_000 + "\",email\n")

    refused = suppression(config, "import", str(bad))
    too_long = suppression(config, "import", str(huge))
    missing = suppression(config, "import", str(tmp_path / "nowhere.csv"))

    assert refused.returncode == 2
    assert "error: line 4: address: phone number is not in E.164 form" in refused.stderr
    assert too_long.returncode == 2 and "error: line 3: is not CSV" in too_long.stderr
    assert "Traceback" not in too_long.stderr
    assert missing.returncode != 0 and "nowhere.csv" in missing.stderr
    assert listed(config) == [("kept@example.com", "email", "complaint")]


def test_every_command_says_what_it_does() -> None:
    group = run("suppression", "--help")
    assert group.returncode == 0
    for command in ("list", "add", "remove", "history", "import", "export"):
        assert command in group.stdout
    assert "suppressed" in group.stdout
    for command, words in (("add", ("--reason", "--note", "--by", "audited")),
                           ("remove", ("--note", "--by", "audited")),
                           ("list", ("--kind", "--reason", "--after", "--limit", "--json")),
                           ("history", ("who added and removed", "--json")),
                           ("import", ("address,kind", "standard input", "bad row")),
                           ("export", ("--output", "CSV"))):
        shown = run("suppression", command, "--help")
        assert shown.returncode == 0, shown.stderr
        flat = " ".join(shown.stdout.split())
        for word in words:
            assert word in flat, (command, word, shown.stdout)
