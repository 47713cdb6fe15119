"""``--log-to mlflow``: one MLflow run per finished harness run, written through ``MlflowClient``.

Where it goes is MLflow's own choice, from its environment
(https://mlflow.org/docs/latest/api_reference/python_api/mlflow.environment_variables.html):
MLFLOW_TRACKING_URI (unset: MLflow's default, ``sqlite:///mlflow.db`` in the current folder, as
mlflow-skinny 3.17.2 was seen to choose), MLFLOW_EXPERIMENT_NAME (default here: manyanswer-harness),
and any credentials MLflow reads itself (MLFLOW_TRACKING_TOKEN, ...; never read or written by the
harness). The tracking URI is never logged nor printed.

What it holds: the configuration as params (flattened keys; each value as its JSON text, ``null``
for None) and the link back as tags (``harness.run_dir``, ``harness.run_uri``, ``harness.run_id``,
``harness.version``, ...); every score with a value and its interval as metrics (``KEY``,
``KEY/lower``, ``KEY/upper``, ``KEY/n``, ``KEY/stderr``; a score without a value has no metric and
a ``harness.na.KEY`` tag), the counts; the per-question table (``log_table``, ``questions.json``);
the HTML report (``report.html``).

``MlflowClient.create_run`` is used, not ``mlflow.start_run``: the fluent API adds tags of its own from
the process (its source's name, the git repository's URL, where a credential may sit); the client
sends the tags given.
"""

from __future__ import annotations

import json
import os

from harness.analysis.trackers import DEFAULT_PROJECT, TABLE_NAME, TrackedRun, Tracker

# MLflow's per-call limits of log_batch (https://mlflow.org/docs/latest/api_reference/rest-api.html#log-batch)
MAX_PARAMS, MAX_METRICS, MAX_TAGS = 100, 1000, 100
MAX_PARAM_CHARS = 6000  # a param's value (MLflow 2.x and later)


class MlflowTracker(Tracker):
    name = "mlflow"
    package = "mlflow"
    extra = "mlflow"

    def log(self, run: TrackedRun) -> str:
        from mlflow.entities import Metric, Param
        from mlflow.tracking import MlflowClient
        from mlflow.utils.time import get_current_time_millis

        client = MlflowClient()
        name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or DEFAULT_PROJECT
        experiment = client.get_experiment_by_name(name)
        experiment_id = experiment.experiment_id if experiment is not None else client.create_experiment(name)
        tags = dict(run.links)
        tags.update({f"harness.na.{key}": "no value" for key, m in run.metrics.items() if m.value is None})
        created = client.create_run(experiment_id, run_name=run.run_id, tags=tags)
        run_id = created.info.run_id
        status = "FAILED"
        try:
            params = [Param(key, _param(key, value)) for key, value in run.config.items()]
            now = get_current_time_millis()
            metrics = [Metric(key, float(value), now, 0) for key, value in run.numbers().items()]
            for i in range(0, len(params), MAX_PARAMS):
                client.log_batch(run_id, params=params[i : i + MAX_PARAMS])
            for i in range(0, len(metrics), MAX_METRICS):
                client.log_batch(run_id, metrics=metrics[i : i + MAX_METRICS])
            table = {column: [row[i] for row in run.rows] for i, column in enumerate(run.columns)}
            client.log_table(run_id, data=table, artifact_file=f"{TABLE_NAME}.json")
            client.log_artifact(run_id, str(run.report))
            status = "FINISHED"
        finally:
            client.set_terminated(run_id, status=status)
        return f"MLflow run {run_id} in experiment {name!r}"


def _param(key: str, value: object) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)
    if len(text) > MAX_PARAM_CHARS:  # refused by MLflow: said, never cut
        raise ValueError(
            f"config {key} is {len(text):,} characters as a param; MLflow takes at most {MAX_PARAM_CHARS:,}"
        )
    return text
