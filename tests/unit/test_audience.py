"""Audiences: recipients read in pages by ascending id, from generators, functions, SQL."""

from __future__ import annotations

import sqlite3
import sys
import textwrap
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from tidings.admission.audience import (
    Audience,
    GeneratorAudience,
    KeysetAudience,
    SqlAudience,
    audience_from_spec,
    check_audiences,
)
from tidings.core.errors import ConfigurationError, InvalidInput
from tidings.core.model import Recipient

SQL_PAGE = """
    SELECT customer_id AS id, email, phone, subscribed AS active, first_name, tier
    FROM customers
    WHERE (:after IS NULL OR customer_id > :after)
    ORDER BY customer_id
    LIMIT :limit
"""


class CountingSource:
    """A generator function that counts how often it is called."""

    def __init__(self, ids: list[str]) -> None:
        self.ids = ids
        self.calls = 0

    def __call__(self) -> Iterator[Recipient]:
        self.calls += 1
        for recipient_id in self.ids:
            yield Recipient(id=recipient_id, email=f"{recipient_id}@example.test")


async def read_all(audience: Audience, limit: int) -> list[list[str]]:
    """Page through an audience the way the scheduler does, returning ids per page."""
    pages: list[list[str]] = []
    after: str | None = None
    while True:
        page = await audience.page(after, limit)
        pages.append([r.id for r in page])
        if not page:
            return pages
        after = page[-1].id


Row = tuple[int, str | None, str | None, object, str, str]


def make_db(path: Path, rows: Sequence[Row]) -> str:
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE customers (customer_id INTEGER PRIMARY KEY, email TEXT,"
                   " phone TEXT, subscribed, first_name TEXT, tier TEXT)")
        db.executemany("INSERT INTO customers VALUES (?, ?, ?, ?, ?, ?)", rows)
    db.close()
    return f"sqlite:///{path}"


# ---------------------------------------------------------------- generator


async def test_a_large_generator_audience_is_read_in_one_pass() -> None:
    # Given 100,000 recipients from a generator, when the scheduler reads them in pages
    # of 5,000, then the generator function runs once: paging is O(n), not O(n²/page).
    ids = [f"cust_{i:06d}" for i in range(100_000)]
    source = CountingSource(ids)
    audience = GeneratorAudience(source)

    pages = await read_all(audience, 5_000)

    assert source.calls == 1
    assert [len(p) for p in pages] == [5_000] * 20 + [0]
    assert [i for p in pages for i in p] == ids


async def test_a_page_after_another_id_restarts_and_skips_what_came_before() -> None:
    # A scheduler restarted mid-occurrence resumes from its durable high-water mark.
    source = CountingSource([f"c{i}" for i in range(10)])
    audience = GeneratorAudience(source)
    await audience.page(None, 3)

    resumed = await audience.page("c6", 2)
    following = await audience.page("c8", 5)

    assert [r.id for r in resumed] == ["c7", "c8"]
    assert [r.id for r in following] == ["c9"]
    assert source.calls == 2


async def test_an_after_that_is_not_an_audience_id_still_pages_correctly() -> None:
    source = CountingSource(["a", "c", "e"])
    audience = GeneratorAudience(source)

    assert [r.id for r in await audience.page("b", 10)] == ["c", "e"]
    assert await audience.page("e", 10) == []
    assert await audience.page("zzz", 10) == []
    assert await audience.page("zzz", 10) == []
    assert source.calls == 2


async def test_starting_over_from_none_reads_the_audience_again() -> None:
    source = CountingSource(["a", "b"])
    audience = GeneratorAudience(source)

    first = await read_all(audience, 10)
    second = await read_all(audience, 10)

    assert first == second == [["a", "b"], []]
    assert source.calls == 2


async def test_ids_out_of_order_are_reported_when_reached_naming_the_id() -> None:
    audience = GeneratorAudience(CountingSource(["a", "b", "c", "d", "b2", "e"]))

    first = await audience.page(None, 3)
    with pytest.raises(ConfigurationError) as caught:
        await audience.page("c", 3)

    assert [r.id for r in first] == ["a", "b", "c"]
    assert caught.value.field == "audience"
    assert "'b2'" in caught.value.message and "ascending" in caught.value.message


async def test_a_duplicate_id_is_out_of_order() -> None:
    audience = GeneratorAudience(CountingSource(["a", "b", "b"]))

    with pytest.raises(ConfigurationError, match="'b'"):
        await audience.page(None, 10)


async def test_unpadded_numeric_ids_get_a_hint() -> None:
    audience = GeneratorAudience(CountingSource([f"cust_{i}" for i in range(8, 12)]))

    with pytest.raises(ConfigurationError, match="zero-pad"):
        await read_all(audience, 100)


async def test_a_generator_that_yields_something_else_is_a_configuration_error() -> None:
    def source() -> Iterator[Recipient]:
        yield Recipient(id="a")
        yield {"id": "b"}  # type: ignore[misc]

    with pytest.raises(ConfigurationError, match="dict, expected Recipient"):
        await GeneratorAudience(source).page(None, 10)


@pytest.mark.parametrize("bad", [7, ""])
async def test_an_id_that_is_not_a_non_empty_string_is_named(bad: object) -> None:
    def source() -> Iterator[Recipient]:
        yield Recipient(id="a")
        yield Recipient(id=bad)  # type: ignore[arg-type]
        yield Recipient(id="c")

    with pytest.raises(ConfigurationError, match=f"recipient id {bad!r}"):
        await GeneratorAudience(source).page(None, 10)


async def test_an_order_break_across_two_pages_is_caught() -> None:
    audience = GeneratorAudience(CountingSource(["a", "b", "c", "b1"]))

    assert [r.id for r in await audience.page(None, 3)] == ["a", "b", "c"]
    with pytest.raises(ConfigurationError, match="'b1' after 'c'"):
        await audience.page("c", 3)


async def test_a_generator_that_fails_is_restarted_not_taken_for_finished() -> None:
    calls = 0

    def source() -> Iterator[Recipient]:
        nonlocal calls
        calls += 1
        yield Recipient(id="a")
        if calls == 1:
            raise ConnectionError("crm went away")
        yield Recipient(id="b")

    audience = GeneratorAudience(source)
    with pytest.raises(ConnectionError):
        await audience.page(None, 10)

    assert [r.id for r in await audience.page(None, 10)] == ["a", "b"]


async def test_a_limit_below_one_is_invalid_input() -> None:
    with pytest.raises(InvalidInput) as caught:
        await GeneratorAudience(CountingSource([])).page(None, 0)
    assert caught.value.field == "limit"


def test_audiences_describe_themselves_and_satisfy_the_protocol() -> None:
    def vip_customers() -> Iterator[Recipient]:
        yield from ()

    generator = GeneratorAudience(vip_customers)
    keyset = KeysetAudience(lambda after, limit: [])
    sql = SqlAudience("sqlite:///crm.db", SQL_PAGE)

    assert all(isinstance(a, Audience) for a in (generator, keyset, sql))
    assert "vip_customers" in generator.describe()
    assert "keyset" in keyset.describe()
    assert sql.describe() == "sql query on sqlite:///crm.db"


# ---------------------------------------------------------------- keyset


async def test_a_keyset_function_receives_after_and_limit() -> None:
    ids = [f"u{i:03d}" for i in range(25)]
    calls: list[tuple[str | None, int]] = []

    def fetch(after: str | None, limit: int) -> list[Recipient]:
        calls.append((after, limit))
        return [Recipient(id=i) for i in ids if after is None or i > after][:limit]

    pages = await read_all(KeysetAudience(fetch), 10)

    assert [len(p) for p in pages] == [10, 10, 5, 0]
    assert calls == [(None, 10), ("u009", 10), ("u019", 10), ("u024", 10)]


async def test_a_keyset_function_that_ignores_after_is_caught() -> None:
    audience = KeysetAudience(lambda after, limit: [Recipient(id="a"), Recipient(id="b")])

    assert [r.id for r in await audience.page(None, 10)] == ["a", "b"]
    with pytest.raises(ConfigurationError, match="'a' after 'b'"):
        await audience.page("b", 10)


async def test_a_keyset_function_that_ignores_limit_is_read_only_up_to_it() -> None:
    def everything(after: str | None, limit: int) -> Iterator[Recipient]:
        yield from (Recipient(id=f"{i:09d}") for i in range(10**9))

    page = await KeysetAudience(everything).page(None, 4)

    assert [r.id for r in page] == ["000000000", "000000001", "000000002", "000000003"]


# ---------------------------------------------------------------- SQL


async def test_a_sql_audience_maps_columns_and_pages_by_integer_id(tmp_path: Path) -> None:
    # Integer ids 1..12 sort numerically in the database; they are handed out as
    # strings and bound back as strings, and paging still crosses 9 -> 10 correctly.
    rows: list[Row] = [(i, f"c{i}@example.test", None, 1, f"Name{i}", "gold")
                       for i in range(1, 13)]
    rows[1] = (2, None, "+4915100000002", 0, "Name2", "silver")
    url = make_db(tmp_path / "crm.db", rows)
    audience = SqlAudience(url, SQL_PAGE)

    pages = await read_all(audience, 5)
    second = (await audience.page(None, 2))[1]

    assert pages == [["1", "2", "3", "4", "5"], ["6", "7", "8", "9", "10"], ["11", "12"], []]
    assert second == Recipient(id="2", email=None, phone="+4915100000002", active=False,
                               data={"first_name": "Name2", "tier": "silver"})


async def test_active_defaults_to_true_and_reads_common_false_words(tmp_path: Path) -> None:
    url = make_db(tmp_path / "crm.db", [(1, "a@x.test", None, "no", "A", "t"),
                                        (2, "b@x.test", None, "yes", "B", "t")])
    with_column = SqlAudience(url, SQL_PAGE)
    without_column = SqlAudience(url, "SELECT customer_id AS id FROM customers WHERE "
                                      "(:after IS NULL OR customer_id > :after) "
                                      "ORDER BY customer_id LIMIT :limit")

    assert [r.active for r in await with_column.page(None, 10)] == [False, True]
    assert [r.active for r in await without_column.page(None, 10)] == [True, True]


async def test_a_sql_audience_opens_the_database_read_only(tmp_path: Path) -> None:
    url = make_db(tmp_path / "crm.db", [(1, "a@x.test", None, 1, "A", "t")])
    audience = SqlAudience(url, "DELETE FROM customers WHERE customer_id > :after "
                                "OR :limit IS NULL RETURNING customer_id AS id")

    with pytest.raises(ConfigurationError) as caught:
        await audience.page("0", 10)

    assert caught.value.field == "audience.query"
    with sqlite3.connect(tmp_path / "crm.db") as db:
        assert db.execute("SELECT count(*) FROM customers").fetchone() == (1,)
    db.close()


async def test_a_query_without_an_id_column_is_refused(tmp_path: Path) -> None:
    url = make_db(tmp_path / "crm.db", [(1, "a@x.test", None, 1, "A", "t")])
    audience = SqlAudience(url, "SELECT email FROM customers WHERE :after IS NULL "
                                "LIMIT :limit")

    with pytest.raises(ConfigurationError) as caught:
        await audience.page(None, 10)

    assert (caught.value.field, caught.value.message) == (
        "audience.query", "result has no 'id' column")


async def test_a_query_that_does_not_compile_reports_sqlites_message(tmp_path: Path) -> None:
    url = make_db(tmp_path / "crm.db", [])
    audience = SqlAudience(url, "SELECT id FROM clients WHERE id > :after LIMIT :limit")

    with pytest.raises(ConfigurationError) as caught:
        await audience.page(None, 10)

    assert caught.value.field == "audience.query"
    assert "no such table: clients" in caught.value.message


async def test_a_query_without_order_by_is_caught_when_rows_come_out_of_order(
        tmp_path: Path) -> None:
    url = make_db(tmp_path / "crm.db", [(i, None, None, 1, "x", "t") for i in (3, 1, 2)])
    audience = SqlAudience(url, "SELECT customer_id AS id FROM customers WHERE "
                                "(:after IS NULL OR customer_id > :after) "
                                "ORDER BY first_name, rowid DESC LIMIT :limit")

    with pytest.raises(ConfigurationError, match="ORDER BY id"):
        await audience.page(None, 10)


async def test_a_query_that_returns_after_again_is_caught(tmp_path: Path) -> None:
    url = make_db(tmp_path / "crm.db", [(i, None, None, 1, "x", "t") for i in (1, 2, 3)])
    audience = SqlAudience(url, "SELECT customer_id AS id FROM customers WHERE "
                                "(:after IS NULL OR customer_id >= :after) "
                                "ORDER BY customer_id LIMIT :limit")

    with pytest.raises(ConfigurationError, match="id > :after"):
        await audience.page("2", 10)


def test_a_query_must_use_after_and_limit() -> None:
    with pytest.raises(ConfigurationError) as caught:
        SqlAudience("sqlite:///crm.db", "SELECT id FROM customers WHERE id > :after")

    assert caught.value.field == "audience.query"
    assert ":limit" in caught.value.message and ":after and" not in caught.value.message


async def test_a_missing_database_file_is_a_url_error(tmp_path: Path) -> None:
    audience = SqlAudience(f"sqlite:///{tmp_path}/missing.db", SQL_PAGE)

    with pytest.raises(ConfigurationError) as caught:
        await audience.page(None, 10)

    assert caught.value.field == "audience.url"
    assert not (tmp_path / "missing.db").exists()


@pytest.mark.parametrize("url", ["postgresql://crm/customers", "mysql://crm"])
def test_other_databases_are_not_supported_yet(url: str) -> None:
    with pytest.raises(ConfigurationError, match="not supported yet") as caught:
        SqlAudience(url, SQL_PAGE)
    assert caught.value.field == "audience.url"


@pytest.mark.parametrize("url", ["crm.db", "sqlite://", "sqlite:///:memory:", "sqlite://host/x"])
def test_a_url_without_a_file_path_is_refused(url: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        SqlAudience(url, SQL_PAGE)
    assert caught.value.field == "audience.url"


async def test_a_path_with_uri_characters_is_still_a_path(tmp_path: Path) -> None:
    folder = tmp_path / "a dir?#"
    folder.mkdir()
    url = make_db(folder / "crm.db", [(1, "a@x.test", None, 1, "A", "t")])

    assert [r.id for r in await SqlAudience(url, SQL_PAGE).page(None, 10)] == ["1"]


# ---------------------------------------------------------------- settings


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """An importable user module with a generator function and a constant."""
    name = "tidings_test_user_audiences"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent("""
        from tidings.core.model import Recipient

        def customers():
            for i in range(3):
                yield Recipient(id=f"c{i}")

        class Segments:
            @staticmethod
            def vip():
                yield Recipient(id="v1")

        NOT_CALLABLE = 3
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    return name


async def test_a_python_spec_imports_the_generator_function(user_module: str) -> None:
    audience = audience_from_spec({"python": f"{user_module}:customers"})
    nested = audience_from_spec({"python": f"{user_module}:Segments.vip"})

    assert await read_all(audience, 2) == [["c0", "c1"], ["c2"], []]
    assert await read_all(nested, 2) == [["v1"], []]


async def test_a_sql_spec_builds_a_sql_audience(tmp_path: Path) -> None:
    url = make_db(tmp_path / "crm.db", [(7, "a@x.test", None, 1, "A", "t")])

    audience = audience_from_spec({"sql": {"url": url, "query": SQL_PAGE}})

    assert [r.id for r in await audience.page(None, 10)] == ["7"]


@pytest.mark.parametrize(("path", "says"), [
    ("no_colon_here", "package.module:function"),
    ("a:b:c", "package.module:function"),
    (":customers", "package.module:function"),
    ("tidings_no_such_module_xyz:customers", "cannot import"),
    ("{module}:missing", "no attribute 'missing'"),
    ("{module}:NOT_CALLABLE", "not callable"),
])
def test_a_bad_import_path_names_the_python_field(user_module: str, path: str,
                                                  says: str) -> None:
    with pytest.raises(ConfigurationError, match=says) as caught:
        audience_from_spec({"python": path.format(module=user_module)})
    assert caught.value.field == "audience.python"


@pytest.mark.parametrize(("spec", "field"), [
    ({}, "audience"),
    ({"sql": {"url": "sqlite:///x.db", "query": SQL_PAGE}, "python": "m:f"}, "audience"),
    ({"csv": "people.csv"}, "audience"),
    ({"sql": "SELECT 1"}, "audience.sql"),
    ({"sql": {"query": SQL_PAGE}}, "audience.sql.url"),
    ({"sql": {"url": "sqlite:///x.db"}}, "audience.sql.query"),
    ({"sql": {"url": "sqlite:///x.db", "query": SQL_PAGE, "qurey": "x"}}, "audience.sql"),
    ({"sql": {"url": "mysql://x/y", "query": SQL_PAGE}}, "audience.sql.url"),
])
def test_a_malformed_spec_names_the_field(spec: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        audience_from_spec(spec)
    assert caught.value.field == field


async def test_a_run_names_the_settings_field_of_the_audience(tmp_path: Path) -> None:
    # Found at the first page, long after start-up: the error still says which campaign.
    audience = audience_from_spec(
        {"sql": {"url": f"sqlite:///{tmp_path}/gone.db", "query": SQL_PAGE}},
        field="campaigns.digest.audience")
    with pytest.raises(ConfigurationError, match="no such file") as caught:
        await audience.page(None, 10)
    assert caught.value.field == "campaigns.digest.audience.sql.url"


async def test_check_audiences_reads_one_page_of_each_sql_audience(tmp_path: Path) -> None:
    url = make_db(tmp_path / "crm.db", [(1, "c1@example.test", None, 1, "Name1", "gold")])
    calls: list[str] = []

    def members() -> Iterator[Recipient]:
        calls.append("called")
        yield Recipient(id="x")

    await check_audiences([SqlAudience(url, SQL_PAGE), GeneratorAudience(members)])
    assert calls == []  # a user's generator is left alone until its occurrence
    no_id = SqlAudience(url, "SELECT email FROM customers WHERE (:after IS NULL OR "
                             "customer_id > :after) ORDER BY customer_id LIMIT :limit")
    with pytest.raises(ConfigurationError, match="no 'id' column"):
        await check_audiences([no_id])
