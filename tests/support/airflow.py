"""Helpers for the Airflow tests: an AIRFLOW_HOME with a SQLite metadata DB, the DAG file of docs/airflow.md, and
``airflow dags test`` as a subprocess (the real CLI, its task runner and its XCom table).
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.e2e import REPO_ROOT

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
