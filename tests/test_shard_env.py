"""--shard auto: I/K from a Slurm job array, a Kubernetes Indexed Job or a launcher's variables,
with the variables as their schedulers set them (harness/execution/shard_env.py cites where); the
recorded shard and run key equal the explicit --shard I/K's; missing, malformed or disagreeing
variables are one line, exit 2, before anything runs. The recipes that use it run in
tests/test_sharding.py."""

from __future__ import annotations

import pytest

from harness.cli import main
from harness.errors import ConfigError
from harness.execution.config import RunConfig, build_config
from harness.execution.shard_env import ALL_VARS, shard_from_env


def slurm(task: int, spec_ids: list[int], step: int = 1) -> dict[str, str]:
    """The variables slurmctld sets for one task (src/slurmctld/job_mgr.c _create_job_array)."""
    return {
        "SLURM_ARRAY_TASK_ID": str(task),
        "SLURM_ARRAY_TASK_COUNT": str(len(spec_ids)),
        "SLURM_ARRAY_TASK_MIN": str(min(spec_ids)),
        "SLURM_ARRAY_TASK_MAX": str(max(spec_ids)),
        "SLURM_ARRAY_TASK_STEP": str(step),
    }


@pytest.mark.parametrize(
    "environ,spec",
    [
        (slurm(0, [0, 1, 2, 3]), "1/4"),  # --array=0-3
        (slurm(3, [0, 1, 2, 3]), "4/4"),
        (slurm(7, [5, 6, 7]), "3/3"),  # --array=5-7: ids need not start at 0
        (slurm(8, [0, 4, 8, 12], step=4), "3/4"),  # --array=0-15:4 (MAX 12, not 15)
        (slurm(1, [1]), "1/1"),  # a one-task array
        ({"JOB_COMPLETION_INDEX": "0", "HARNESS_SHARD_COUNT": "5"}, "1/5"),
        ({"JOB_COMPLETION_INDEX": "4", "HARNESS_SHARD_COUNT": "5"}, "5/5"),
        ({"HARNESS_SHARD_INDEX": "2", "HARNESS_SHARD_COUNT": "3"}, "3/3"),  # the Ray launcher's hook
        # two sources that agree: both recorded
        ({"JOB_COMPLETION_INDEX": "1", "HARNESS_SHARD_INDEX": "1", "HARNESS_SHARD_COUNT": "3"}, "2/3"),
        ({**slurm(2, [0, 1, 2]), "HARNESS_SHARD_COUNT": "3"}, "3/3"),
        ({"JOB_COMPLETION_INDEX": " 2 ", "HARNESS_SHARD_COUNT": "3\n"}, "3/3"),  # whitespace around a number
    ],
)
def test_the_shard_and_the_variables_read(environ, spec):
    got, read = shard_from_env({**environ, "SLURM_JOB_ID": "77", "HOME": "/x"})
    assert got == spec and read == environ  # only the shard variables, as set


@pytest.mark.parametrize(
    "environ,message",
    [
        ({}, "no scheduler's shard variables are set"),
        ({"SLURM_JOB_ID": "77"}, "no scheduler's shard variables are set"),  # a batch job, not an array
        ({"SLURM_ARRAY_TASK_ID": "3"}, "SLURM_ARRAY_TASK_COUNT, SLURM_ARRAY_TASK_MIN, SLURM_ARRAY_TASK_MAX, "
         "SLURM_ARRAY_TASK_STEP are not set"),  # fmt: skip
        ({k: v for k, v in slurm(0, [0, 1]).items() if k != "SLURM_ARRAY_TASK_STEP"}, "SLURM_ARRAY_TASK_STEP is not set"),
        (slurm(3, [1, 3, 7]), "the Slurm array is not a range"),  # --array=1,3,7: STEP 1
        (slurm(2, [0, 2, 3]), "its 3 ids in steps of 1 from 0 do not end at 3"),
        (slurm(2, [0, 4, 8], step=4), "task 2 is not one of the Slurm array's ids"),
        ({**slurm(0, [0, 1]), "SLURM_ARRAY_TASK_ID": "5"}, "task 5 is not one of"),
        ({**slurm(0, [0, 1]), "SLURM_ARRAY_TASK_STEP": "0"}, "not a range"),
        ({**slurm(0, [0, 1]), "SLURM_ARRAY_TASK_COUNT": "two"}, "SLURM_ARRAY_TASK_COUNT='two' is not a whole number"),
        ({"JOB_COMPLETION_INDEX": "3"}, "JOB_COMPLETION_INDEX=3 but HARNESS_SHARD_COUNT (the Job's completions) is not set"),
        ({"HARNESS_SHARD_INDEX": "0"}, "HARNESS_SHARD_INDEX=0 but HARNESS_SHARD_COUNT (the number of shards)"),
        ({"HARNESS_SHARD_COUNT": "4"}, "HARNESS_SHARD_COUNT=4 without an index"),
        ({"JOB_COMPLETION_INDEX": "4", "HARNESS_SHARD_COUNT": "4"}, "the index must be below the count"),
        ({"JOB_COMPLETION_INDEX": "0", "HARNESS_SHARD_COUNT": "0"}, "the index must be below the count"),
        ({"JOB_COMPLETION_INDEX": "-1", "HARNESS_SHARD_COUNT": "4"}, "JOB_COMPLETION_INDEX='-1' is not a whole number"),
        ({"JOB_COMPLETION_INDEX": "1.0", "HARNESS_SHARD_COUNT": "4"}, "is not a whole number"),
        ({"JOB_COMPLETION_INDEX": "", "HARNESS_SHARD_COUNT": "4"}, "is not a whole number"),
        ({"JOB_COMPLETION_INDEX": "٣", "HARNESS_SHARD_COUNT": "4"}, "is not a whole number"),  # a non-ASCII digit
        ({"JOB_COMPLETION_INDEX": "1", "HARNESS_SHARD_COUNT": "9" * 40}, "is not a whole number from 0 to 999999999"),
        ({"HARNESS_SHARD_INDEX": "0", "HARNESS_SHARD_COUNT": "2000000"}, "2000000 shards, at most 1000000"),
        # two schedulers' variables that disagree
        ({**slurm(1, [0, 1, 2]), "JOB_COMPLETION_INDEX": "0", "HARNESS_SHARD_COUNT": "3"},
         "the Slurm job array (SLURM_ARRAY_TASK_ID=1, "),  # fmt: skip
        ({**slurm(1, [0, 1, 2]), "HARNESS_SHARD_COUNT": "4"}, "says 3 shards, HARNESS_SHARD_COUNT=4"),
        ({"JOB_COMPLETION_INDEX": "0", "HARNESS_SHARD_INDEX": "1", "HARNESS_SHARD_COUNT": "3"},
         "JOB_COMPLETION_INDEX=0 with HARNESS_SHARD_COUNT=3 says shard 1/3, HARNESS_SHARD_INDEX=1 with "
         "HARNESS_SHARD_COUNT=3 says 2/3"),  # fmt: skip
    ],
)
def test_missing_malformed_or_disagreeing_variables_are_one_line(environ, message):
    with pytest.raises(ConfigError) as exc:
        shard_from_env(environ)
    text = str(exc.value)
    assert text.startswith("--shard auto: ") and "\n" not in text and message in text, text


def test_the_key_directory_and_record_are_the_explicit_shards(monkeypatch):
    for name in ALL_VARS:
        monkeypatch.delenv(name, raising=False)
    for name, value in slurm(9, [5, 9, 13], step=4).items():
        monkeypatch.setenv(name, value)
    auto = build_config({"dataset": "hotpotqa:dev", "shard": "auto", "limit": 5})
    explicit = build_config({"dataset": "hotpotqa:dev", "shard": "2/3", "limit": 5})
    assert auto.shard == explicit.shard == "2/3"  # merge, the directory name and the resume check read this
    assert auto.shard_env == slurm(9, [5, 9, 13], step=4) and explicit.shard_env is None
    assert auto.config_hash() == explicit.config_hash() == build_config({"dataset": "hotpotqa:dev"}).config_hash()
    # the Python API, a YAML value and a config read back from results.json take the same path
    assert RunConfig(shard=" AUTO ").shard == "2/3"
    back = RunConfig.model_validate(auto.model_dump(mode="json"))
    assert (back.shard, back.shard_env) == ("2/3", auto.shard_env)
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "10")  # read back, it is never resolved again
    assert RunConfig.model_validate(auto.model_dump(mode="json")).shard == "2/3"


def test_refused_before_anything_runs(monkeypatch, tmp_path, capsys):
    """A vllm/ model without --base-url would launch a server: the refusal comes first, nothing written."""
    for name in ALL_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("JOB_COMPLETION_INDEX", "1")
    monkeypatch.setenv("HARNESS_SHARD_INDEX", "2")
    monkeypatch.setenv("HARNESS_SHARD_COUNT", "3")
    out = tmp_path / "run"
    rc = main(["run", "--model", "vllm/Qwen/Qwen2.5-0.5B-Instruct", "--dataset", "hotpotqa:dev", "--shard", "auto",
               "--out", str(out)])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("error: --shard auto: JOB_COMPLETION_INDEX=1"), err
    assert not out.exists() and list(tmp_path.iterdir()) == []
    # a YAML file's shard: auto is the flag's
    (tmp_path / "run.yaml").write_text("shard: auto\ndataset: hotpotqa:dev\n")
    rc = main(["run", "--config", str(tmp_path / "run.yaml"), "--out", str(out)])
    assert rc == 2 and "says shard 2/3" in capsys.readouterr().err and not out.exists()


def test_the_docs_quote_the_recipe_files_the_tests_run():
    """docs/cost-and-scale.md includes the files themselves (pymdownx.snippets, the repository root a
    base path), so the page shows what tests/test_sharding.py runs."""
    from pathlib import Path

    import yaml

    root = Path(__file__).resolve().parents[1]
    page = (root / "docs" / "cost-and-scale.md").read_text(encoding="utf-8")
    for name in ("slurm_shards.sh", "k8s_shards.yaml", "k8s_merge.yaml"):
        assert f'--8<-- "examples/{name}"' in page and (root / "examples" / name).is_file()
    mkdocs = yaml.safe_load((root / "mkdocs.yml").read_text(encoding="utf-8"))
    (snippets,) = [e["pymdownx.snippets"] for e in mkdocs["markdown_extensions"] if isinstance(e, dict) and "pymdownx.snippets" in e]
    assert "." in snippets["base_path"] and snippets["check_paths"] is True


@pytest.mark.parametrize(
    "environ",
    [
        {"JOB_COMPLETION_INDEX": "1\nrm -rf /"},
        {"JOB_COMPLETION_INDEX": "4\n", "HARNESS_SHARD_COUNT": "4\n"},
        {"HARNESS_SHARD_COUNT": " 4\n"},
        {**slurm(3, [0, 1, 2]), "SLURM_ARRAY_TASK_MAX": "7\n"},
    ],
)
def test_a_value_with_a_line_break_stays_one_line(environ):
    with pytest.raises(ConfigError) as exc:
        shard_from_env(environ)
    assert "\n" not in str(exc.value), str(exc.value)
