"""Billable usage: the meter's rules, the question's checks, summing, CSV, roll-up."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest
import sqlalchemy as sa

from sardeenz.cluster.usage_fanout import rows_of
from sardeenz.config import Settings
from sardeenz.store.db import Database
from sardeenz.store.usage import HOUR, UsageRepository
from sardeenz.tenancy.admission import Admission, Ticket
from sardeenz.tenancy.meter import UsageMeter, charged
from sardeenz.tenancy.spec import Tenant
from sardeenz.tenancy.usage import UsageService
from sardeenz.tenancy.usage_query import (
    InvalidUsageQuery,
    TenantUsageReport,
    UsageQuery,
    parse_query,
    pending_rows,
    query_of,
    summed,
    to_csv,
)

USAGE = b'{"id":"x","usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}'
ALL = ("tenant", "key_id", "model")


def test_billed_tokens_follow_the_budgets_rule() -> None:
    assert charged(200, USAGE, b"", 100, 50) == (7, 3, False)
    assert charged(500, USAGE, b"", 100, 50) == (7, 3, False)  # usage wins, even failed
    assert charged(200, b"data: [DONE]\n\n", USAGE, 100, 50) == (7, 3, False)  # prev read
    assert charged(200, b"no usage", b"", 100, 50) == (100, 50, True)  # the estimate
    assert charged(499, b"", b"", 100, 50) == (100, 50, True)  # the engine worked for it
    assert charged(503, b"{}", b"", 100, 50) == (0, 0, False)  # refused upstream


def test_the_meter_counts_per_minute_and_refusals_by_reason() -> None:
    meter = UsageMeter()
    meter.note((120.5, "t", "k", "m", 200, 9, 4, USAGE, b"", ""))
    meter.note((179.9, "t", "k", "m", 200, 9, 4, b"", b"", ""))
    meter.note((180.0, "t", "k", "m", 502, 9, 4, b"", b"", ""))
    meter.rejected(130.0, "t", "k", "m", "requests_per_minute")
    got = meter.take()
    assert got == {
        (120, "t", "k", "m", ""): [2, 0, 7 + 9, 3 + 4, 1],
        (180, "t", "k", "m", ""): [1, 1, 0, 0, 0],
        (120, "t", "k", "m", "requests_per_minute"): [1, 0, 0, 0, 0],
    }
    assert meter.take() == {}
    meter.note((121.0, "t", "k", "m", 200, 1, 1, USAGE, b"", ""))
    meter.restore(got)  # a failed write: added to what came in meanwhile
    assert meter.peek()[(120, "t", "k", "m", "")] == [3, 0, 23, 10, 1]


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (("200", "100", None, None), "invalid_range"),
        (("x", None, None, None), "invalid_time"),
        ((None, "inf", None, None), "invalid_time"),
        ((None, "99999999999999", None, None), "invalid_time"),
        ((None, None, "59", None), "invalid_step"),
        ((None, None, "1w", None), "invalid_step"),
        ((None, None, None, "tenant,pod"), "unknown_group_by"),
        (("0", "86400000", "1m", None), "too_many_points"),
    ],
)
def test_bad_questions_name_their_code(
    args: tuple[str | None, str | None, str | None, str | None], code: str
) -> None:
    with pytest.raises(InvalidUsageQuery) as err:
        parse_query(*args, now=1_000_000)
    assert err.value.code == code
    assert err.value.status == 422


def test_a_question_is_widened_to_whole_steps() -> None:
    q = parse_query(None, None, None, None, now=1_000_030)
    assert (q.start, q.end, q.step, q.group_by) == (1_000_080 - 86_400, 1_000_080, None, ALL)
    q = parse_query("2026-12-04T10:20:00", "2026-12-04T12:00:01Z", "1h", "model,tenant", 0)
    assert q.start % HOUR == 0
    assert q.end - q.start == 3 * HOUR
    assert q.group_by == ("tenant", "model")  # a fixed order
    assert parse_query("0", "600", "5m", "", 0).group_by == ()
    assert query_of(q.as_json()) == q


def test_rows_are_summed_per_bucket_and_group() -> None:
    q = UsageQuery(0, 7200, 3600, ("tenant",))
    meter = UsageMeter()
    meter.note((60.0, "a", "k1", "m", 200, 1, 1, USAGE, b"", ""))
    meter.note((3700.0, "a", "k2", "m", 200, 1, 1, USAGE, b"", ""))
    meter.note((7300.0, "a", "k2", "m", 200, 1, 1, USAGE, b"", ""))  # past the end
    meter.rejected(90.0, "a", "k1", "m", "tokens_per_day")
    rows = pending_rows(meter.peek(), q)
    rows.append((0, "a", "", "", "", 2, 1, 5, 5, 0))  # as the table would answer
    buckets = summed(rows, q)
    assert [(b.start.timestamp(), b.requests, b.prompt_tokens) for b in buckets] == [
        (0, 3, 12),
        (3600, 1, 7),
    ]
    first = buckets[0]
    assert (first.tenant, first.key, first.model) == ("a", None, None)
    assert (first.rejected_requests, first.rejected) == (1, {"tokens_per_day": 1})
    assert first.failed_requests == 1
    assert first.end.timestamp() == 3600


def test_an_answer_too_big_is_refused_not_cut() -> None:
    q = UsageQuery(0, 60, None, ALL)
    rows = [(0, "a", f"k{i}", "m", "", 1, 0, 0, 0, 0) for i in range(100_001)]
    with pytest.raises(InvalidUsageQuery) as err:
        summed(rows, q)
    assert err.value.code == "too_many_buckets"
    assert len(summed(rows[:100_000], q)) == 100_000


def test_csv_has_fixed_columns_and_no_formulas() -> None:
    q = UsageQuery(0, 60, None, ALL)
    buckets = summed([(0, "a", "=cmd", "m", "queue_full", 2, 0, 0, 0, 0)], q)
    report = TenantUsageReport(
        start=buckets[0].start, end=buckets[0].end, step=None, group_by=[], buckets=buckets
    )
    rows = list(csv.DictReader(io.StringIO(to_csv(report))))
    assert rows[0]["key"] == "'=cmd"
    assert rows[0]["rejected_requests_per_minute"] == "0"
    assert rows[0]["rejected_queue_full"] == "2"  # a reason of another feature: a column more
    assert rows[0]["start"] == "1970-01-01T00:00:00Z"


def test_another_pods_answer_is_checked() -> None:
    good = {"rows": [[0, "a", "k", "m", "", 1, 0, 2, 3, 0]]}
    assert rows_of(good) == [(0, "a", "k", "m", "", 1, 0, 2, 3, 0)]
    assert rows_of(None) is None
    assert rows_of({"rows": [[0, "a", "k", "m", "", "1", 0, 2, 3, 0]]}) is None
    assert rows_of({"rows": [[0, "a"]]}) is None
    assert rows_of({"rows": {}}) is None


async def test_minutes_roll_up_into_hours_and_old_hours_go(tmp_path: Path) -> None:
    db = Database(f"sqlite+aiosqlite:///{tmp_path / 'u.db'}")
    await db.migrate()
    repo = UsageRepository(db)
    day = 86_400 * 100
    await repo.add([(day + 60, "a", "k", "m", "", 1, 0, 10, 1, 0)])
    await repo.add([(day + 60, "a", "k", "m", "", 2, 1, 20, 2, 1)])  # the same minute: added
    await repo.add([(day + 3540, "a", "k", "m", "", 1, 0, 5, 5, 0)])
    await repo.add([(day + HOUR, "a", "k", "m", "", 4, 0, 1, 1, 0)])  # stays a minute
    await repo.add([(day - 10 * HOUR, "a", "k", "m", "", 9, 0, 9, 9, 0)], step=HOUR)
    before = await repo.query(day - 86_400, day + 86_400, None, ("tenant",))
    assert before == [(day - 86_400, "a", "", "", "", 17, 1, 45, 18, 1)]
    assert await repo.roll_up(minutes_before=day + HOUR, hours_before=day - HOUR) == 2
    assert await repo.count() == 2  # one hour row, one minute row; the old hour is gone
    after = await repo.query(day, day + 2 * HOUR, HOUR, ALL)
    assert sorted(after) == [
        (day, "a", "k", "m", "", 4, 1, 35, 8, 1),
        (day + HOUR, "a", "k", "m", "", 4, 0, 1, 1, 0),
    ]
    await db.close()


async def test_a_failed_write_keeps_the_buckets_and_a_read_counts_them_once(
    tmp_path: Path,
) -> None:
    db = Database(f"sqlite+aiosqlite:///{tmp_path / 'u.db'}")
    await db.migrate()
    meter = UsageMeter()
    service = UsageService(Settings(data_dir=tmp_path), meter, UsageRepository(db))
    q = UsageQuery(0, 600, None, ALL)
    meter.note((60.0, "a", "k", "m", 200, 1, 1, USAGE, b"", ""))
    async with db.engine.begin() as conn:  # the database refuses the next write
        await conn.execute(sa.text("ALTER TABLE usage_buckets RENAME TO away"))
    with pytest.raises(sa.exc.OperationalError):
        await service.flush()
    assert meter.peek() == {(60, "a", "k", "m", ""): [1, 0, 7, 3, 0]}  # kept
    async with db.engine.begin() as conn:
        await conn.execute(sa.text("ALTER TABLE away RENAME TO usage_buckets"))
    meter.note((70.0, "a", "k", "m", 200, 1, 1, USAGE, b"", ""))
    await service.flush()
    assert meter.peek() == {}
    meter.note((80.0, "a", "k", "m", 200, 1, 1, USAGE, b"", ""))  # not written yet
    (row,) = summed(await service.local(q), q)
    assert (row.requests, row.prompt_tokens) == (3, 21)  # the table's 2 + the meter's 1
    report = await service.report(q)
    assert (report.pods, report.missing_pods) == ([], [])  # a single node
    await service.stop()  # writes the last one
    assert await UsageRepository(db).query(0, 600, None, ()) == [
        (0, "", "", "", "", 3, 0, 21, 9, 0)
    ]
    await db.close()


def test_a_forwarded_request_is_not_metered_again() -> None:
    meter = UsageMeter()
    admission = Admission(meter=meter)
    admission.configure([Tenant(name="t", source="api", api_keys=["k"])])
    here = admission.admit("k", "m", {"max_tokens": 3}, 40)
    forwarded = admission.admit("k", "m", {"max_tokens": 3}, 40)
    assert isinstance(here, Ticket)
    assert isinstance(forwarded, Ticket)
    forwarded.unmetered()
    here.settle(200, b"no usage", b"")
    forwarded.settle(200, USAGE, b"")
    # the estimate: 40 bytes / 4 + max_tokens
    assert list(meter.take().values()) == [[1, 0, 10, 3, 1]]
