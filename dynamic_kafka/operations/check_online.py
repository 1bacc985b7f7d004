"""``dynamic-kafka check --online``: what only the brokers can tell, added to the offline report.

Each pipeline of a valid project is planned as ``plan`` would (it reads the metadata, the state and the brokers'
offsets, and writes nothing). A plan that fails (a topic the metadata lists that does not exist under
``on_topic_missing: fail``, a cluster that does not answer, refused credentials) is a problem of that pipeline; a
plan's warnings (a missing topic under ``on_topic_missing: warn``, a skipped cluster) are notes.
"""

from __future__ import annotations

from dynamic_kafka.config.loader import load_project_config
from dynamic_kafka.errors import DynamicKafkaError
from dynamic_kafka.operations.check import CheckReport, Problem
from dynamic_kafka.pipeline import Pipeline


def check_online(report: CheckReport) -> CheckReport:
    """``report`` (of :func:`dynamic_kafka.operations.check.check_project`) with each pipeline's plan problems and
       warnings;
    unchanged when the files have problems (their pipelines cannot be planned).
    """
    if not report.ok:
        return report
    source = report.files[0]
    project = load_project_config(source)
    problems: list[Problem] = []
    notes = list(report.notes)
    for index, pipeline in enumerate(project.pipelines):
        try:
            plan = Pipeline(project, pipeline.id).plan()
        except DynamicKafkaError as e:
            problems.append(Problem(file=source, location=f"pipelines[{index}]", message=str(e)))
            continue
        notes += [f"pipeline {pipeline.id!r}: {f.message}" for f in plan.findings if f.is_warning]
    return report.with_online(tuple(problems), tuple(notes))
