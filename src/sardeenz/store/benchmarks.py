"""Benchmark persistence: runs, their scenarios, and one metrics row per scenario.

Writes are small and each is its own short transaction (a status change, a
scenario's result with its metrics): the runner never holds the database
while requests are in flight, so other writers (profiles, the instance
registry) wait milliseconds at most. Children are deleted explicitly with
their run, so deletion does not depend on SQLite's foreign-key pragma.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import RowMapping

from sardeenz.domain import utcnow
from sardeenz.store.db import Database
from sardeenz.store.profiles import as_utc
from sardeenz.store.records import (
    BenchmarkMetrics,
    BenchmarkRun,
    BenchmarkScenario,
    RunStatus,
    ScenarioStatus,
)
from sardeenz.store.schema import benchmark_metrics, benchmark_runs, benchmark_scenarios

_RUN_COLUMNS = tuple(c.name for c in benchmark_runs.columns)
_SCENARIO_COLUMNS = tuple(c.name for c in benchmark_scenarios.columns if c.name != "position")
_METRIC_COLUMNS = tuple(c.name for c in benchmark_metrics.columns)
_UNFINISHED = (RunStatus.PENDING.value, RunStatus.RUNNING.value)
_SCENARIO_UNFINISHED = (ScenarioStatus.PENDING.value, ScenarioStatus.RUNNING.value)


def _dates(data: dict[str, Any]) -> dict[str, Any]:
    for key, value in data.items():
        if isinstance(value, datetime):
            data[key] = as_utc(value)
    return data


def _metrics(row: RowMapping) -> BenchmarkMetrics:
    return BenchmarkMetrics.model_validate({k: row[k] for k in _METRIC_COLUMNS})


def _scenario(row: RowMapping, metrics: BenchmarkMetrics | None) -> BenchmarkScenario:
    data = _dates({k: row[k] for k in _SCENARIO_COLUMNS})
    return BenchmarkScenario.model_validate({**data, "metrics": metrics})


def _run(row: RowMapping, scenarios: list[BenchmarkScenario]) -> BenchmarkRun:
    data = _dates({k: row[k] for k in _RUN_COLUMNS})
    return BenchmarkRun.model_validate({**data, "scenarios": scenarios})


def _json_values(model: Any, columns: Sequence[str]) -> dict[str, Any]:
    dumped: dict[str, Any] = model.model_dump(by_alias=False)
    return {k: dumped[k] for k in columns if k in dumped}


class BenchmarkRepository:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def create(self, run: BenchmarkRun) -> None:
        """The run and all its scenarios, in one transaction."""
        async with self._db.engine.begin() as conn:
            await conn.execute(benchmark_runs.insert().values(**_json_values(run, _RUN_COLUMNS)))
            if run.scenarios:
                await conn.execute(
                    benchmark_scenarios.insert(),
                    [
                        {**_json_values(s, _SCENARIO_COLUMNS), "position": i}
                        for i, s in enumerate(run.scenarios)
                    ],
                )

    async def update_run(self, run_id: str, **values: Any) -> None:
        async with self._db.engine.begin() as conn:
            await conn.execute(
                benchmark_runs.update().where(benchmark_runs.c.id == run_id).values(**values)
            )

    async def update_scenario(self, scenario_id: str, **values: Any) -> None:
        async with self._db.engine.begin() as conn:
            await conn.execute(
                benchmark_scenarios.update()
                .where(benchmark_scenarios.c.id == scenario_id)
                .values(**values)
            )

    async def save_result(
        self, scenario_id: str, metrics: BenchmarkMetrics | None, **values: Any
    ) -> None:
        """A finished scenario: its final fields and its metrics, together."""
        async with self._db.engine.begin() as conn:
            await conn.execute(
                benchmark_scenarios.update()
                .where(benchmark_scenarios.c.id == scenario_id)
                .values(**values)
            )
            await conn.execute(
                benchmark_metrics.delete().where(benchmark_metrics.c.scenario_id == scenario_id)
            )
            if metrics is not None:
                await conn.execute(
                    benchmark_metrics.insert().values(**_json_values(metrics, _METRIC_COLUMNS))
                )

    async def get(self, run_id: str) -> BenchmarkRun | None:
        runs = await self._load(sa.select(benchmark_runs).where(benchmark_runs.c.id == run_id))
        return runs[0] if runs else None

    async def list_runs(self, limit: int = 100, offset: int = 0) -> list[BenchmarkRun]:
        """Newest first, with scenarios and metrics."""
        query = (
            sa.select(benchmark_runs)
            .order_by(benchmark_runs.c.created_at.desc(), benchmark_runs.c.id)
            .limit(limit)
            .offset(offset)
        )
        return await self._load(query)

    async def _load(self, query: sa.Select[Any]) -> list[BenchmarkRun]:
        async with self._db.engine.connect() as conn:
            run_rows = (await conn.execute(query)).mappings().all()
            if not run_rows:
                return []
            ids = [r["id"] for r in run_rows]
            sc = benchmark_scenarios.c
            scenario_rows = (
                (
                    await conn.execute(
                        sa.select(benchmark_scenarios)
                        .where(sc.run_id.in_(ids))
                        .order_by(sc.run_id, sc.position)
                    )
                )
                .mappings()
                .all()
            )
            scenario_ids = [r["id"] for r in scenario_rows]
            metric_rows = (
                (
                    await conn.execute(
                        sa.select(benchmark_metrics).where(
                            benchmark_metrics.c.scenario_id.in_(scenario_ids)
                        )
                    )
                )
                .mappings()
                .all()
                if scenario_ids
                else []
            )
        metrics = {r["scenario_id"]: _metrics(r) for r in metric_rows}
        by_run: dict[str, list[BenchmarkScenario]] = {i: [] for i in ids}
        for row in scenario_rows:
            by_run[row["run_id"]].append(_scenario(row, metrics.get(row["id"])))
        return [_run(r, by_run[r["id"]]) for r in run_rows]

    async def delete(self, run_id: str) -> bool:
        async with self._db.engine.begin() as conn:
            scenario_ids = sa.select(benchmark_scenarios.c.id).where(
                benchmark_scenarios.c.run_id == run_id
            )
            await conn.execute(
                benchmark_metrics.delete().where(benchmark_metrics.c.scenario_id.in_(scenario_ids))
            )
            await conn.execute(
                benchmark_scenarios.delete().where(benchmark_scenarios.c.run_id == run_id)
            )
            result = await conn.execute(
                benchmark_runs.delete().where(benchmark_runs.c.id == run_id)
            )
        return bool(result.rowcount)

    async def fail_unfinished(self, reason: str) -> list[str]:
        """Mark every pending/running run (and its unfinished scenarios) failed.

        Called at start-up: a run can only be unfinished then if the previous
        server process died under it, and nothing will ever finish it.
        """
        now = utcnow()
        rc, sc = benchmark_runs.c, benchmark_scenarios.c
        async with self._db.engine.begin() as conn:
            ids = list(
                (await conn.execute(sa.select(rc.id).where(rc.status.in_(_UNFINISHED))))
                .scalars()
                .all()
            )
            if not ids:
                return []
            await conn.execute(
                benchmark_scenarios.update()
                .where(sc.run_id.in_(ids), sc.status.in_(_SCENARIO_UNFINISHED))
                .values(status=ScenarioStatus.FAILED.value, error_message=reason, completed_at=now)
            )
            await conn.execute(
                benchmark_runs.update()
                .where(rc.id.in_(ids))
                .values(status=RunStatus.FAILED.value, error_message=reason, completed_at=now)
            )
        return ids
