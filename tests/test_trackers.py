"""``harness run --log-to wandb|mlflow`` (issue 44): the finished run logged to an experiment tracker, its
numbers read from results.json (never re-scored). Real runs of a scripted model on the vendored FanOutQA dev
questions (tests/scripted_runs.py); the trackers' own files read back: W&B's offline run folder (its
``.wandb`` log of records, read with a reader of its documented format below, and the table file it
writes beside it) and MLflow's SQLite store read with ``MlflowClient``. Values compared with results.json.

What rests on documentation rather than on files read back: that ``wandb sync`` uploads an offline
folder as it is (https://docs.wandb.ai/ref/cli/wandb-sync/), and that a tracking server takes what the
SQLite store takes (https://mlflow.org/docs/latest/self-hosting/); neither can be reached here."""

from __future__ import annotations

import argparse
import hashlib
import json
import struct
import sys
from pathlib import Path
from typing import ClassVar

import pytest
from scripted_runs import partial_answerer

import harness
from harness.analysis.report import write_report
from harness.analysis.trackers import TRACKERS, Tracker, flatten, tracked_run
from harness.api import TrackingError
from harness.cli import main
from harness.datasets import load_dataset
from harness.models.scripted import last_user, register_script, unregister_script

SECRET = "sk-test-a1b2c3d4e5f6g7h8"  # an OpenAI-shaped key in the environment and on the command line


QAMPARI = "qampari:sample"  # set-f1 only: the fast tier's runs load no spaCy


def harness_run(out: Path, *extra: str, script=None, dataset: str = QAMPARI, limit: int = 8) -> int:
    register_script("track", script or partial_answerer(dataset))
    try:
        argv = ["run", "--model", "scripted/track", "--dataset", dataset, "--limit", str(limit)]
        return main([*argv, "--no-cache", "--out", str(out), *extra])
    finally:
        unregister_script("track")


def results_of(run: Path) -> dict:
    return json.loads((run / "results.json").read_text())


def files_of(run: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(run.iterdir()) if p.is_file()}


class Memory(Tracker):
    """A tracker registered in-process (as a plugin is): keeps what it was given."""

    logged: ClassVar[list] = []
    fail: ClassVar[str | None] = None

    def log(self, run):
        Memory.logged.append((run, files_of(run.run_dir), run.report.read_text()))
        if Memory.fail:
            raise RuntimeError(Memory.fail)
        return "in memory"


@pytest.fixture
def memory():
    TRACKERS.register("memory")(Memory)
    Memory.logged, Memory.fail = [], None
    yield Memory
    TRACKERS.unregister("memory")


# ---------------------------------------------------------------------------------- refused before anything runs
def test_an_unknown_tracker_is_one_line_and_exit_2_before_anything_runs(tmp_path, capsys):
    asked = []
    assert harness_run(tmp_path / "run", "--log-to", "nosuch", script=lambda *a: asked.append(a) or "x") == 2
    assert capsys.readouterr().err.strip() == (
        "error: --log-to nosuch: unknown tracker 'nosuch' (known: mlflow, wandb; or FILE.py:NAME, package.module:NAME)"
    )
    assert not asked and not (tmp_path / "run").exists()
    assert harness_run(tmp_path / "run", "--log-to", ",") == 2
    assert capsys.readouterr().err.strip() == (
        "error: --log-to: ',' names no tracker (expected wandb, mlflow or both, comma-separated)"
    )


@pytest.mark.parametrize("name", ["wandb", "mlflow"])
def test_a_tracker_not_installed_names_the_extra(name, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, name, None)  # importlib.util.find_spec(name) is None: not installed
    asked = []
    assert harness_run(tmp_path / "run", "--log-to", name, script=lambda *a: asked.append(a) or "x") == 2
    assert capsys.readouterr().err.strip() == (
        f"error: --log-to {name}: the {name} package is not installed: pip install 'manyanswer-harness[{name}]'"
    )
    assert not asked and not (tmp_path / "run").exists()


def test_online_wandb_without_a_key_is_refused_before_anything_runs(tmp_path, capsys, monkeypatch):
    pytest.importorskip("wandb")
    for name in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    asked = []
    assert harness_run(tmp_path / "run", "--log-to", "wandb", script=lambda *a: asked.append(a) or "x") == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --log-to wandb: W&B is online and has no API key") and "\n" not in err
    assert not asked and not (tmp_path / "run").exists()
    # a key stored by `wandb login` (netrc) is enough; so is offline mode
    (tmp_path / "netrc").write_text("machine api.wandb.ai\n  login user\n  password k3y-0123456789\n")
    (tmp_path / "netrc").chmod(0o600)
    from harness.analysis.trackers.wandb_tracker import WandbTracker

    WandbTracker.check("wandb")
    (tmp_path / "netrc").unlink()
    monkeypatch.setenv("WANDB_MODE", "offline")
    WandbTracker.check("wandb")


# ---------------------------------------------------------------------------------- what a tracker is given
def test_the_tracked_run_is_results_json(tmp_path, memory, capsys):
    out = tmp_path / "run"
    assert harness_run(out, "--log-to", "memory") == 0
    assert capsys.readouterr().err.strip().splitlines()[-1] == "logged to memory: in memory"
    results = results_of(out)
    assert results["config"]["log_to"] == ["memory"]
    (run, files, report), = memory.logged
    lines = (out / "samples.jsonl").read_text().splitlines()
    samples = {json.loads(line)["id"]: json.loads(line)["answer"] for line in lines}
    # the configuration, flattened, equal to results.json's
    assert run.config == flatten(results["config"]) and run.config["generation.temperature"] == 0.0
    assert run.config["agent_args"] == {} and run.config["log_to"] == ["memory"]
    # every score with its interval, from scores.uncertainty
    scores, uncertainty = results["scores"], results["scores"]["uncertainty"]
    f1 = run.metrics["set-f1.f1"]
    assert f1.value == scores["set-f1"]["f1"] == uncertainty["set-f1.f1"]["value"] and 0 < f1.value < 1
    assert [f1.lower, f1.upper] == uncertainty["set-f1.f1"]["ci95"] and f1.n == 8
    assert f1.stderr == uncertainty["set-f1.f1"]["stderr"] > 0
    assert set(run.metrics) == set(uncertainty) and run.headline == "set-f1.f1"
    assert run.numbers()["set-f1.f1/upper"] == uncertainty["set-f1.f1"]["ci95"][1]
    assert uncertainty["set-f1.recall_ge_0.8"]["stderr"] is None  # no spread measured: none sent, never 0
    assert "set-f1.recall_ge_0.8/stderr" not in run.numbers() and "set-f1.recall_ge_0.8/upper" in run.numbers()
    assert run.counts["counts.finished"] == 8 and run.counts["tokens.total"] == results["tokens"]["total"]
    # one row per question, its values those of scores.raw
    raw = {r["question_id"]: r["set-f1"] for r in scores["raw"]}
    table = [dict(zip(run.columns, row)) for row in run.rows]
    assert [r["id"] for r in table] == list(raw) == results["sample_ids"]
    assert [r["set-f1.f1"] for r in table] == [raw[q]["f1"] for q in raw]
    assert [r["set-f1.n_correct"] for r in table] == [raw[q]["n_correct"] for q in raw]
    assert [r["answer"] for r in table] == [samples[q] for q in raw]
    assert all("Not An Answer" in a for a in samples.values())
    # the link back, and the report (the run has none: the project's own, written aside)
    assert run.links["harness.run_dir"] == str(out.resolve()) and run.links["harness.run_uri"] == out.resolve().as_uri()
    assert run.links["harness.run_id"] == results["run_id"]
    assert run.links["harness.version"] == results["harness"]["version"]
    assert results["run_id"] in report and report.startswith("<!DOCTYPE html>") and not (out / "report.html").exists()
    assert files == files_of(out)  # logging wrote nothing into the run


def test_a_resume_that_finishes_the_run_logs_it_again_and_log_to_is_not_in_the_key(tmp_path, memory, capsys):
    out = tmp_path / "run"
    answer, first = partial_answerer(QAMPARI), load_dataset(QAMPARI).samples[0].question
    failed_once = tmp_path / "failed-once"

    def flaky(messages, *rest):  # the first question fails once, as a server answering 500
        if first in last_user(messages) and not failed_once.exists():
            failed_once.touch()
            raise RuntimeError("server said 500")
        return answer(messages, *rest)

    assert harness_run(out, "--max-attempts", "1", script=flaky, limit=3) == 1  # no --log-to: nothing logged
    key = results_of(out)["config_hash"]
    assert not memory.logged and results_of(out)["config"]["log_to"] is None
    assert harness_run(out, "--max-attempts", "1", "--log-to", "memory", script=flaky, limit=3) == 0
    results = results_of(out)
    assert results["config_hash"] == key and results["status"] == "complete"  # the same run, resumed
    (run, _, _), = memory.logged
    assert run.status == "complete" and run.counts["counts.finished"] == 3 and run.counts["counts.failed"] == 0
    # the run's own report is sent while it is newer than results.json; one older (from before the last
    # invocation) is written anew aside, the run's own left as it was
    assert main(["report", str(out)]) == 0
    run = tracked_run(out)
    assert run.report == (out / "report.html").resolve()
    run.close()
    stale = (out / "report.html").read_bytes()
    assert harness_run(out, "--log-to", "memory", limit=3) == 0
    assert memory.logged[-1][0].report.parent != out.resolve() and (out / "report.html").read_bytes() == stale
    assert memory.logged[-1][2] == write_report(out, tmp_path / "now.html").read_text()


def test_a_tracker_failing_keeps_the_run_and_exits_6(tmp_path, memory, capsys):
    out = tmp_path / "run"
    memory.fail = f"upload refused for key {SECRET}"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPENAI_API_KEY", SECRET)
        assert harness_run(out, "--log-to", "memory", limit=2) == 6
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-2:] == [
        "error: --log-to memory: logging failed: RuntimeError: upload refused for key [REDACTED]",
        "the run is complete and its files are written; rerun the same command to log it again (exit status 6)",
    ]
    (_, files, _), = memory.logged
    assert files == files_of(out) and results_of(out)["status"] == "complete"
    # from Python: TrackingError, the run's record with it
    register_script("track", lambda *a: pytest.fail("asked again"))
    try:
        with pytest.raises(TrackingError) as info:
            harness.run(
                model="scripted/track", dataset=QAMPARI, limit=2, cache=False, out=str(out), log_to="memory",
                show_progress=False,
            )
    finally:
        unregister_script("track")
    assert info.value.exit_code == 6 and info.value.record.run_id == results_of(out)["run_id"]
    memory.fail = None  # the same command logs it, nothing asked again
    assert harness_run(out, "--log-to", "memory", script=lambda *a: pytest.fail("asked again"), limit=2) == 0


def test_launched_shards_leave_the_logging_to_their_launcher():
    from harness.api import build_run_config, tracked
    from harness.commands.run import add_parser, shard_argv
    from harness.execution.config import RunConfig

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["run", "--log-to", "wandb,mlflow", "--shards", "2", "--launcher", "ray", "--limit", "4"])
    assert shard_argv(args) == ["run", "--limit=4", "--log-to=wandb,mlflow"]  # each shard records config.log_to
    shard = build_run_config({"log_to": "nosuch", "shard": "1/2", "launcher": "ray"})  # not checked: not logged here
    assert shard.log_to == ["nosuch"] and not tracked(shard)
    assert tracked(RunConfig(log_to=["nosuch"], shard="1/2"))  # a shard run by hand logs itself


# ---------------------------------------------------------------------------------- the real trackers, offline
def wandb_records(path: Path) -> list[bytes]:
    """The records of a ``.wandb`` file: LevelDB's log format
    (https://github.com/google/leveldb/blob/main/doc/log_format.md): 32 KiB blocks of records, each a
    7-byte header (crc32 uint32, length uint16, type uint8: 1 full, 2 first, 3 middle, 4 last) then
    its bytes, a block's last 6 bytes or fewer zeros; after W&B's own 7-byte header (``:W&B``, magic,
    version). Each record is a ``wandb_internal_pb2.Record`` (wandb 0.31 ships no reader of its own)."""
    data = path.read_bytes()
    assert data[:4] == b":W&B"
    records, pending, pos, block = [], b"", 7, 32768
    while pos + 7 <= len(data):
        room = block - pos % block
        if room < 7:
            pos += room
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0:  # the rest of the block is padding
            pos += room
            continue
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind == 1:
            records.append(chunk)
        elif kind == 2:
            pending = chunk
        elif kind == 3:
            pending += chunk
        else:
            records.append(pending + chunk)
    return records


def secret_free(folder: Path) -> None:
    for path in folder.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path


@pytest.mark.slow  # imports wandb (about 2 s) and starts its core process
def test_wandb_offline_run_folder_holds_results_json(tmp_path, monkeypatch, capsys):
    pytest.importorskip("wandb")
    from wandb.proto import wandb_internal_pb2

    wb = tmp_path / "wb"
    places = {"WANDB_DIR": "", "WANDB_CACHE_DIR": "cache", "WANDB_DATA_DIR": "data", "WANDB_CONFIG_DIR": "config"}
    for var, sub in places.items():
        monkeypatch.setenv(var, str(wb / sub))
    (wb / "cache").mkdir(parents=True)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_PROJECT", "track44")
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    out = tmp_path / "run"
    assert harness_run(out, "--log-to", "wandb", "--current-date", SECRET, dataset="fanoutqa:dev", limit=3) == 0
    assert "logged to wandb: W&B run " in capsys.readouterr().err
    results = results_of(out)
    assert results["config"]["current_date"] == "[REDACTED]"  # as the run's files write it

    (folder,) = (wb / "wandb").glob("offline-run-*")
    config, summary, artifacts, run_records = {}, {}, [], []
    for raw in wandb_records(next(folder.glob("run-*.wandb"))):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(raw)
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run_records.append(record.run)
            config.update({u.key: json.loads(u.value_json) for u in record.run.config.update})
        elif kind == "config":
            config.update({u.key: json.loads(u.value_json) for u in record.config.update})
        elif kind == "summary":
            summary.update({u.key or ".".join(u.nested_key): json.loads(u.value_json) for u in record.summary.update})
        elif kind == "artifact":
            artifacts.append(record.artifact)
    (wrun,) = run_records
    assert wrun.project == "track44" and wrun.display_name == results["run_id"] and wrun.run_group == results["run_id"]
    # the configuration: results.json's, flattened, plus the link back
    flat = flatten(results["config"])
    assert {k: config[k] for k in flat} == flat and config["log_to"] == ["wandb"]
    assert config["harness.run_dir"] == str(out.resolve()) and config["harness.run_uri"] == out.resolve().as_uri()
    assert config["harness.run_id"] == results["run_id"] and config["harness.version"] == results["harness"]["version"]
    # every score and its interval
    uncertainty = results["scores"]["uncertainty"]
    for key, entry in uncertainty.items():
        assert summary[key] == entry["value"]
        assert [summary[f"{key}/lower"], summary[f"{key}/upper"], summary[f"{key}/n"]] == [*entry["ci95"], entry["n"]]
        assert summary.get(f"{key}/stderr") == entry["stderr"]
    assert summary["fanoutqa-string.acc.loose"] == results["scores"]["fanoutqa-string"]["acc"]["loose"]
    assert summary["headline"] == "fanoutqa-string.acc.loose" and summary["counts.finished"] == 3
    # the per-question table: the file W&B wrote, its rows results.json's
    (table_file,) = folder.glob("files/media/table/questions_*.table.json")
    table = json.loads(table_file.read_text())
    rows = [dict(zip(table["columns"], row)) for row in table["data"]]
    raw = {r["question_id"]: r["fanoutqa-string"] for r in results["scores"]["raw"]}
    assert [r["id"] for r in rows] == list(raw) and [r["epoch"] for r in rows] == [1, 1, 1]
    assert [r["fanoutqa-string.acc"] for r in rows] == [raw[q]["acc"] for q in raw]
    rouge1 = [r["fanoutqa-string.rouge.rouge1.fscore"] for r in rows]
    assert rouge1 == [raw[q]["rouge"]["rouge1"]["fscore"] for q in raw]
    # the report: an artifact whose one file is the project's report of the run (md5, as W&B's manifest holds it)
    (report,) = [a for a in artifacts if a.type == "report"]
    (entry,) = report.manifest.contents
    fresh = write_report(out, tmp_path / "report.html").read_bytes()
    assert entry.path == "report.html" and entry.size == len(fresh)
    assert entry.digest == __import__("base64").b64encode(hashlib.md5(fresh).digest()).decode()
    # W&B's own capture is off: no metadata (argv, git remote), no console log; no secret anywhere
    assert not (folder / "files" / "wandb-metadata.json").exists() and not (folder / "files" / "output.log").exists()
    secret_free(wb)


@pytest.mark.slow  # imports mlflow (about 3 s) and creates its SQLite store
def test_mlflow_sqlite_store_holds_results_json(tmp_path, monkeypatch, capsys):
    pytest.importorskip("mlflow")
    pytest.importorskip("sqlalchemy")
    from mlflow.tracking import MlflowClient

    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.chdir(tmp_path)  # the store's artifacts: ./mlruns, MLflow's default beside a SQLite store
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "track44")
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    out = tmp_path / "run"
    assert harness_run(out, "--log-to", "mlflow", "--current-date", SECRET, dataset="fanoutqa:dev", limit=3) == 0
    assert "logged to mlflow: MLflow run " in capsys.readouterr().err
    results = results_of(out)

    client = MlflowClient(tracking_uri=store)
    (run,) = client.search_runs([client.get_experiment_by_name("track44").experiment_id])
    assert run.info.status == "FINISHED" and run.info.run_name == results["run_id"]
    flat = flatten(results["config"])
    assert run.data.params == {k: v if isinstance(v, str) else json.dumps(v, sort_keys=True) for k, v in flat.items()}
    assert run.data.params["generation.temperature"] == "0.0" and run.data.params["log_to"] == '["mlflow"]'
    tags = run.data.tags
    assert tags["harness.run_dir"] == str(out.resolve()) and tags["harness.run_uri"] == out.resolve().as_uri()
    assert tags["harness.run_id"] == results["run_id"] and tags["harness.version"] == results["harness"]["version"]
    assert tags["harness.status"] == "complete" and tags["harness.headline"] == "fanoutqa-string.acc.loose"
    assert not any(t.startswith("mlflow.source") for t in tags)  # no process or git facts of MLflow's own
    metrics = run.data.metrics
    for key, entry in results["scores"]["uncertainty"].items():
        assert metrics[key] == entry["value"]
        assert [metrics[f"{key}/lower"], metrics[f"{key}/upper"], metrics[f"{key}/n"]] == [*entry["ci95"], entry["n"]]
    assert metrics["counts.finished"] == 3 and metrics["tokens.total"] == results["tokens"]["total"]
    assert sorted(a.path for a in client.list_artifacts(run.info.run_id)) == ["questions.json", "report.html"]
    downloaded = client.download_artifacts(run.info.run_id, "questions.json", str(tmp_path / "dl"))
    table = json.loads(Path(downloaded).read_text())
    rows = [dict(zip(table["columns"], row)) for row in table["data"]]
    raw = {r["question_id"]: r["fanoutqa-string"] for r in results["scores"]["raw"]}
    assert [r["id"] for r in rows] == list(raw)
    assert [r["fanoutqa-string.acc"] for r in rows] == [raw[q]["acc"] for q in raw]
    report = Path(client.download_artifacts(run.info.run_id, "report.html", str(tmp_path / "dl")))
    assert report.read_bytes() == write_report(out, tmp_path / "report.html").read_bytes()
    secret_free(tmp_path / "mlruns")
    assert SECRET.encode() not in (tmp_path / "mlflow.db").read_bytes()
