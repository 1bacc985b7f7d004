"""Helpers for the Airflow tests: the DAG file of docs/airflow.md; an AIRFLOW_HOME with a SQLite metadata DB and
``airflow dags test`` as a subprocess (the real CLI, its task runner and its XCom table); and a whole deployment
(scheduler, DAG processor, triggerer, API server) on PostgreSQL.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import closing, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.support.e2e import REPO_ROOT

if TYPE_CHECKING:
    from collections.abc import Callable
    from datetime import datetime

AIRFLOW = str(Path(sys.executable).with_name("airflow"))
DAG_FILE = "dynamic_kafka_dags.py"
# Generous: on a loaded machine one `airflow dags test` (CLI start, task process, Spark job) took minutes.
DAGS_TEST_TIMEOUT_S = 900
READ_TIMEOUT_S = 30.0


def documented_dag_file() -> str:
    """The example DAG file of docs/airflow.md (its first Python block): the test runs what the page shows."""
    page = (REPO_ROOT / "docs" / "airflow.md").read_text(encoding="utf-8")
    match = re.search(r"```python\n(.*?)```", page, re.DOTALL)
    assert match is not None, "docs/airflow.md has no python block"
    return match.group(1)


@dataclass
class AirflowHome:
    """One AIRFLOW_HOME: a migrated SQLite DB and a DAGs folder holding the documented DAG file."""

    root: Path

    @property
    def database(self) -> Path:
        return self.root / "airflow.db"

    def env(self, config_path: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
        return {
            **os.environ,
            "AIRFLOW_HOME": str(self.root),
            "AIRFLOW__CORE__DAGS_FOLDER": str(self.root / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{self.database}",
            "DYNAMIC_KAFKA_CONFIG": str(config_path),
            **(extra or {}),
        }

    @classmethod
    def create(cls, root: Path) -> AirflowHome:
        home = cls(root)
        (root / "dags").mkdir(parents=True)
        (root / "dags" / DAG_FILE).write_text(documented_dag_file(), encoding="utf-8")
        done = subprocess.run(
            [AIRFLOW, "db", "migrate"],
            env=home.env(root / "none.yaml"),
            capture_output=True,
            text=True,
            timeout=DAGS_TEST_TIMEOUT_S,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return home

    def dags_test(
        self, dag_id: str, config_path: Path, logical_date: str | None = None, extra: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """``airflow dags test DAG [DATE]``: every task of one DAG run, in this process's children, to the end."""
        argv = [AIRFLOW, "dags", "test", dag_id, *([logical_date] if logical_date else [])]
        return subprocess.run(
            argv,
            env=self.env(config_path, extra),
            capture_output=True,
            text=True,
            timeout=DAGS_TEST_TIMEOUT_S,
            check=False,
        )

    def query(self, sql: str, *args: str) -> list[tuple[Any, ...]]:
        """Rows of the metadata DB, read only. A read right after a CLI run can meet the DB mid-checkpoint (its
        WAL being folded back): such a read is repeated until a deadline.
        """
        deadline = time.monotonic() + READ_TIMEOUT_S
        while True:
            try:
                # Closed at once (sqlite3's own context manager only ends the transaction): a connection left to
                # the garbage collector keeps its view of the WAL index while Airflow's next process writes.
                with closing(sqlite3.connect(f"file:{self.database}?mode=ro", uri=True)) as db:
                    return db.execute(sql, args).fetchall()
            except sqlite3.DatabaseError as e:
                if time.monotonic() > deadline:
                    raise AssertionError(f"{self.database}: {e}; {self.diagnosis()}") from e
                time.sleep(0.5)

    def diagnosis(self) -> str:
        """The database's journal mode, its files and SQLite's integrity check, for a read that kept failing."""
        files = ", ".join(f"{p.name} {p.stat().st_size} B" for p in sorted(self.root.glob("airflow.db*")))
        with closing(sqlite3.connect(self.database)) as db:
            mode = db.execute("PRAGMA journal_mode").fetchone()
            check = db.execute("PRAGMA integrity_check").fetchall()[:5]
        return f"journal mode {mode}, files: {files}, integrity check: {check}"

    def task_states(self, dag_id: str) -> list[tuple[str, str, str]]:
        """(run id, task id, state) of every task instance of the DAG, in run order."""
        rows = self.query(
            "SELECT run_id, task_id, state FROM task_instance WHERE dag_id = ? ORDER BY start_date", dag_id
        )
        return [(str(r), str(t), str(s)) for r, t, s in rows]

    def xcoms(self, dag_id: str, task_id: str) -> list[Any]:
        """Every ``return_value`` XCom of one task of the DAG, in run order, as JSON values."""
        rows = self.query(
            "SELECT value FROM xcom WHERE dag_id = ? AND task_id = ? AND key = 'return_value' ORDER BY timestamp",
            dag_id,
            task_id,
        )
        return [json.loads(v) for (v,) in rows]

    def every_byte(self) -> bytes:
        """Everything Airflow wrote under its home: the DB (XCom, rendered fields, task instances) and the logs."""
        return b"".join(p.read_bytes() for p in sorted(self.root.rglob("*")) if p.is_file())


# The processes of an Airflow 3 deployment, as an operator runs them (docs/airflow.md, "Deploying").
COMPONENTS = ("api-server", "dag-processor", "scheduler", "triggerer")
START_TIMEOUT_S = 180.0
POLL_S = 1.0


@dataclass
class AirflowDeployment:
    """A real Airflow 3 deployment on one PostgreSQL database: its scheduler (LocalExecutor), DAG processor,
    triggerer and API server (the tasks' Execution API) as processes, the documented DAG file in its DAGs folder.
    Its components' output and the task logs stay under ``root``, so :meth:`every_byte` reads them all.
    """

    root: Path
    database_url: str
    config_path: Path
    api_port: int
    extra: dict[str, str]
    processes: dict[str, subprocess.Popen[bytes]]

    @classmethod
    def create(
        cls, root: Path, database_url: str, config_path: Path, api_port: int, extra: dict[str, str]
    ) -> AirflowDeployment:
        """An AIRFLOW_HOME with the documented DAG file and a migrated database; nothing started yet."""
        (root / "dags").mkdir(parents=True)
        (root / "dags" / DAG_FILE).write_text(documented_dag_file(), encoding="utf-8")
        (root / "components").mkdir()
        deployment = cls(root, database_url, config_path, api_port, extra, {})
        deployment.cli("db", "migrate")
        return deployment

    def env(self, **more: str) -> dict[str, str]:
        api = f"http://127.0.0.1:{self.api_port}"
        return {
            **os.environ,
            "AIRFLOW_HOME": str(self.root),
            "AIRFLOW__CORE__DAGS_FOLDER": str(self.root / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "4",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{api}/execution/",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__API__BASE_URL": api,
            "AIRFLOW__API__WORKERS": "1",
            # One secret for the whole deployment: the scheduler signs the tokens the API server checks.
            "AIRFLOW__API_AUTH__JWT_SECRET": "test-deployment-jwt-secret-" * 3,
            "AIRFLOW__API__SECRET_KEY": "test-deployment-secret-key",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": self.database_url,
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "DYNAMIC_KAFKA_CONFIG": str(self.config_path),
            **self.extra,
            **more,
        }

    def cli(self, *argv: str) -> str:
        """One ``airflow`` command; its output, or an assertion error showing it."""
        done = subprocess.run(
            [AIRFLOW, *argv],
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=DAGS_TEST_TIMEOUT_S,
            check=False,
        )
        assert done.returncode == 0, f"airflow {' '.join(argv)}: {done.stdout[-3000:]}{done.stderr[-3000:]}"
        return done.stdout

    def start(self, component: str, **env: str) -> None:
        """Starts one component (``scheduler``, ...) in its own process group, its output in ``components/``."""
        argv = [AIRFLOW, component]
        if component == "api-server":
            argv += ["--host", "127.0.0.1", "--port", str(self.api_port)]
        with (self.root / "components" / f"{component}.log").open("ab") as out:
            self.processes[component] = subprocess.Popen(
                argv, env=self.env(**env), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def stop(self, component: str) -> None:
        """Stops one component and its children (the scheduler's task processes): SIGTERM, then SIGKILL."""
        process = self.processes.pop(component)
        for sig, wait_s in ((signal.SIGTERM, 60), (signal.SIGKILL, 30)):
            with suppress(ProcessLookupError):
                os.killpg(process.pid, sig)
            try:
                process.wait(wait_s)
                return
            except subprocess.TimeoutExpired:
                continue

    def stop_all(self) -> None:
        for component in list(self.processes):
            self.stop(component)

    def _connect(self) -> Any:
        """A connection to the metadata database (psycopg2 takes the URL without SQLAlchemy's driver name)."""
        import psycopg2

        return closing(psycopg2.connect(self.database_url.replace("+psycopg2", "")))

    def query(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        """Rows of the metadata database."""
        with self._connect() as db, db.cursor() as cursor:
            cursor.execute(sql, args)
            rows = cursor.fetchall()
            db.rollback()
            return rows

    def set_paused(self, dag_id: str, paused: bool) -> None:
        """Pauses or unpauses a DAG in the metadata database, the field ``airflow dags pause``/``unpause`` sets and
        the scheduler reads (without paying an ``airflow`` process's start-up for each, ~9 s on CI)."""
        with self._connect() as db, db.cursor() as cursor:
            cursor.execute("UPDATE dag SET is_paused = %s WHERE dag_id = %s", (paused, dag_id))
            assert cursor.rowcount == 1, f"no DAG {dag_id} in the metadata database"
            db.commit()

    def wait_for(self, what: str, probe: Callable[[], Any], timeout_s: float) -> Any:
        """Polls ``probe`` until it returns something truthy; on timeout fails with the components' state."""
        deadline = time.monotonic() + timeout_s
        while True:
            found = probe()
            if found:
                return found
            if time.monotonic() > deadline:
                raise AssertionError(f"after {timeout_s:.0f} s, still waiting for {what}\n{self.diagnosis()}")
            for name, process in self.processes.items():
                if process.poll() is not None:
                    raise AssertionError(f"airflow {name} exited ({process.returncode})\n{self.diagnosis()}")
            time.sleep(POLL_S)

    def diagnosis(self, lines: int = 40) -> str:
        """The task instances, and the tail of every component's output and of the newest task logs."""
        parts = ["task instances (dag, run, task, try, state):"]
        with suppress(Exception):
            rows = self.query(
                "SELECT dag_id, run_id, task_id, try_number, state FROM task_instance ORDER BY start_date NULLS LAST"
            )
            parts += [f"  {row}" for row in rows]
        logs = sorted(self.root.glob("components/*.log"))
        logs += sorted((self.root / "logs").rglob("*.log"), key=lambda p: p.stat().st_mtime)[-3:]
        for log in logs:
            tail = log.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:]
            parts += [f"--- {log.relative_to(self.root)} (tail)", *tail]
        return "\n".join(parts)

    def intervals(self, dag_id: str, run_ids: list[str]) -> list[tuple[datetime, datetime]]:
        """The data interval of each of these runs."""
        return [
            self.query(
                "SELECT data_interval_start, data_interval_end FROM dag_run WHERE dag_id = %s AND run_id = %s",
                dag_id,
                run_id,
            )[0]
            for run_id in run_ids
        ]

    def runs(self, dag_id: str) -> list[tuple[str, str, str]]:
        """(run id, run type, state) of every run of the DAG, oldest first."""
        rows = self.query("SELECT run_id, run_type, state FROM dag_run WHERE dag_id = %s ORDER BY id", dag_id)
        return [(str(r), str(t), str(s)) for r, t, s in rows]

    def task(self, dag_id: str, run_id: str, task_id: str) -> tuple[str | None, int]:
        """(state, try number) of one task instance."""
        rows = self.query(
            "SELECT state, try_number FROM task_instance WHERE dag_id = %s AND run_id = %s AND task_id = %s",
            dag_id,
            run_id,
            task_id,
        )
        return (rows[0][0], int(rows[0][1])) if rows else (None, 0)

    def xcom(self, dag_id: str, run_id: str, task_id: str) -> Any:
        """The ``return_value`` XCom of one task instance, as a JSON value."""
        ((value,),) = self.query(
            "SELECT value FROM xcom WHERE dag_id = %s AND run_id = %s AND task_id = %s AND key = 'return_value'",
            dag_id,
            run_id,
            task_id,
        )
        return json.loads(value) if isinstance(value, str) else value

    def database_text(self) -> str:
        """Every row of every table of the metadata database as text (XCom, rendered fields, triggers, logs...)."""
        tables = [t for (t,) in self.query("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")]
        return "\n".join(
            str(row)
            for table in tables
            for row in self.query(f'SELECT t::text FROM "{table}" t')  # noqa: S608
        )

    def every_byte(self) -> bytes:
        """Everything under AIRFLOW_HOME: the task logs, the components' output, the config Airflow wrote."""
        return b"".join(p.read_bytes() for p in sorted(self.root.rglob("*")) if p.is_file())
