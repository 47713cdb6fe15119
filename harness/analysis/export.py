"""``harness export fanoutqa-submission RUN_DIR... --out DIR``: FanOutQA's official leaderboard
submission from test-set runs.

The layout and the metadata template are those of zhudotexe/fanoutqa ``leaderboard-submissions/``:
``{closedbook,openbook,evidenceprovided}-generations/NAME.jsonl`` (one ``{"id", "answer"}`` line per
test question, answers as strings, as ``hydrate.py``'s ``read_jsonl_answers`` asserts) and
``metadata/NAME.json`` with the fields of ``hydrate.py``'s ``SubmissionMetadata``, a setting that is
not submitted being ``null`` (as in ``metadata/deepseek-v3-LightRAG.json``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, ValidationError

from harness.errors import HarnessError
from harness.records import MAX_SMALL_BYTES, plain_file_name, read_input_text, write_bytes_atomic
from harness.text import json_bytes

# our --setting -> the leaderboard's setting name (folder prefix and metadata key)
SETTING_NAMES = {"closed-book": "closedbook", "open-book": "openbook", "evidence-provided": "evidenceprovided"}
SUBMISSION_TYPES = ("FOUNDATION", "FINETUNE", "PROMPT", "OTHER")
TEMPLATE_FIELDS = (
    "name",
    "authors",
    "url",
    "citation",
    "type",
    "context",
    "is_trained_for_function_calling",
    "details",
)


class SubmissionMetadata(BaseModel):
    """leaderboard-submissions/metadata/NAME.json (field order as in the official files)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, description="the name of your model")
    authors: str = Field(min_length=1, description="the list of authors, in natural language")
    url: str | None = Field(description="a link to your model's website, if applicable (null otherwise)")
    citation: str = Field(description="authors and year in citation format, e.g. 'Zhu et al., 2024'")
    type: Literal["FOUNDATION", "FINETUNE", "PROMPT", "OTHER"]
    context: StrictInt = Field(gt=0, description="the context length of the model your system uses")
    is_trained_for_function_calling: StrictBool
    details: str | None = Field(None, description="e.g. API model revision or Hugging Face model ID")
    closedbook_generations: str | None
    openbook_generations: str | None
    evidenceprovided_generations: str | None


def file_stem(name: str) -> str:
    stem = re.sub(r"[^a-z0-9._-]+", "-", name.lower()).strip("-.")
    if not stem:
        raise HarnessError(f"cannot make a file name from --name {name!r}: pass --file-name")
    return stem


def load_metadata_file(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    text = read_input_text(path, "--metadata", max_bytes=MAX_SMALL_BYTES)
    try:
        data = yaml.safe_load(text)  # YAML is a superset of JSON
    except yaml.YAMLError as exc:
        raise HarnessError(f"{path}: not valid YAML/JSON ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise HarnessError(f"{path}: expected a mapping of metadata fields")
    unknown = sorted(set(data) - set(TEMPLATE_FIELDS))
    if unknown:
        raise HarnessError(f"{path}: unknown field(s) {', '.join(unknown)} (known: {', '.join(TEMPLATE_FIELDS)})")
    return data


class RunForExport:
    """One finished test-set run: its setting, facts and answers in test-set order."""

    def __init__(self, run_dir: Path):
        from harness.datasets import load_dataset
        from harness.execution.paths import recorded_path
        from harness.execution.record import read_results
        from harness.records import RESULTS_FILE, load_finished

        self.dir = run_dir
        if not (run_dir / RESULTS_FILE).exists():
            raise HarnessError(f"{run_dir}: not a run directory (no {RESULTS_FILE})")
        self.results = results = read_results(run_dir / RESULTS_FILE)
        dataset, self.setting = results.dataset, results.setting
        if dataset.name != "fanoutqa":
            raise HarnessError(f"{run_dir}: a {dataset.spec} run; the FanOutQA leaderboard takes FanOutQA runs")
        if dataset.split != "test":
            raise HarnessError(
                f"{run_dir}: a {dataset.spec} run; the leaderboard takes test-set generations "
                "(run with --dataset fanoutqa:test)"
            )
        if self.setting not in SETTING_NAMES:
            raise HarnessError(f"{run_dir}: setting {self.setting!r} is not one of the leaderboard's")
        self.model = results.config.model
        check_strategy_implements(run_dir, results.agent_name, results.agent.settings if results.agent else None, self.setting)
        self.context_size = results.context_size
        self.native_tool_calling = results.native_tool_calling
        test = load_dataset(dataset.spec, recorded_path(results.config.data_path, run_dir, results.config.out))
        if test.info.sha256 != dataset.sha256:
            raise HarnessError(f"{run_dir}: {dataset.spec} changed since the run (sha256 differs)")
        finished = load_finished(run_dir)
        self.test_ids = [s.id for s in test.samples]
        # The official reader wants a string per line; a finished sample with no answer (context
        # full, rounds exhausted) is exported as "" and scores 0, as a missing line would.
        self.answers = [
            {"id": qid, "answer": _as_text(finished[qid].get("answer"))} for qid in self.test_ids if qid in finished
        ]
        self.no_answer = [qid for qid in self.test_ids if qid in finished and finished[qid].get("answer") is None]
        self.failed = [qid for qid in results.failures if qid not in finished]
        self.missing = len(self.test_ids) - len(self.answers)


def _as_text(answer: Any) -> str:
    if answer is None:
        return ""
    return answer if isinstance(answer, str) else json.dumps(answer, ensure_ascii=False)


def validate_submission(out: Path, stem: str, test_ids: set[str]) -> dict[str, Any]:
    """Check what was written the way the official side reads it: the metadata against the template,
    each named generations file present, every line {"id": str, "answer": str}, ids unique and known."""
    meta_path = out / "metadata" / f"{stem}.json"
    try:
        metadata = SubmissionMetadata(**json.loads(meta_path.read_text(encoding="utf-8")))
    except (ValueError, TypeError) as exc:
        raise HarnessError(f"{meta_path}: does not match the submission template ({exc})") from None
    counts = {}
    for setting in SETTING_NAMES.values():
        name = getattr(metadata, f"{setting}_generations")
        if name is None:
            continue
        path = out / f"{setting}-generations" / name
        if not path.is_file():
            raise HarnessError(f"{meta_path}: {setting}_generations names {path}, which does not exist")
        seen: set[str] = set()
        for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            record = json.loads(line)
            if not isinstance(record.get("id"), str) or not isinstance(record.get("answer"), str):
                raise HarnessError(f"{path}:{lineno}: each line needs 'id' and 'answer' strings")
            if record["id"] in seen or record["id"] not in test_ids:
                raise HarnessError(f"{path}:{lineno}: duplicate or unknown id {record['id']!r}")
            seen.add(record["id"])
        counts[setting] = len(seen)
    if not counts:
        raise HarnessError(f"{meta_path}: names no generations file")
    return {"metadata": metadata.model_dump(), "answers": counts}


def export_fanoutqa_submission(
    run_dirs: list[str],
    out: str | Path,
    fields: dict[str, Any],
    file_name: str | None = None,
    allow_partial: bool = False,
) -> dict[str, Any]:
    out = Path(out)
    if file_name is not None:
        plain_file_name(file_name, "--file-name")
    runs = [RunForExport(Path(d)) for d in run_dirs]
    models = sorted({r.model for r in runs})
    if len(models) > 1:
        raise HarnessError(f"the runs are of different models ({', '.join(models)}): a submission is one system")
    by_setting: dict[str, RunForExport] = {}
    for run in runs:
        if run.setting in by_setting:
            raise HarnessError(
                f"two {run.setting} runs ({by_setting[run.setting].dir}, {run.dir}): give one per setting"
            )
        by_setting[run.setting] = run
    warnings = []
    for run in runs:
        if run.missing:
            what = f"{run.dir} answers {len(run.answers)} of {len(run.test_ids)} test questions"
            if run.failed:
                what += f" ({len(run.failed)} failed)"
            if not allow_partial:
                raise HarnessError(f"{what}: finish the run (rerun it) or pass --allow-partial")
            warnings.append(f"{what}; the leaderboard scores the missing ones 0")
        if run.no_answer:
            warnings.append(f'{run.dir}: {len(run.no_answer)} finished question(s) without an answer exported as ""')

    # What the runs know, unless given: the context size and native tool calling.
    if fields.get("context") is None:
        sizes = sorted({r.context_size for r in runs if r.context_size})
        if len(sizes) != 1:
            found = ", ".join(map(str, sizes)) or "unknown"
            raise HarnessError(f"the runs' context sizes are {found}: pass --context N")
        fields["context"] = sizes[0]
    if fields.get("is_trained_for_function_calling") is None:
        # a model run with native tool calling is one trained for it; otherwise we cannot tell
        fields["is_trained_for_function_calling"] = any(r.native_tool_calling for r in runs)
        if not any(r.native_tool_calling for r in runs):
            warnings.append(
                "is_trained_for_function_calling set to false (no run used native tool calling); "
                "pass --trained-for-function-calling if the model is"
            )
    fields.setdefault("details", models[0])
    missing = [f for f in ("name", "authors", "citation", "type") if fields.get(f) is None]
    if missing:
        raise HarnessError(f"the submission needs {', '.join('--' + f for f in missing)} (or --metadata FILE)")
    stem = file_name or file_stem(fields["name"])
    generations = {
        f"{SETTING_NAMES[s]}_generations": (f"{stem}.jsonl" if s in by_setting else None) for s in SETTING_NAMES
    }
    try:
        metadata = SubmissionMetadata(**{k: fields.get(k) for k in TEMPLATE_FIELDS}, **generations)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise HarnessError(f"metadata: {'.'.join(map(str, first['loc']))}: {first['msg']}") from None

    written = []
    for setting, run in by_setting.items():
        written.append(f"{SETTING_NAMES[setting]}-generations/{stem}.jsonl")
        lines = "".join(json.dumps(a, ensure_ascii=False) + "\n" for a in run.answers)
        write_bytes_atomic(out / written[-1], json_bytes(lines))
    written.append(f"metadata/{stem}.json")
    write_bytes_atomic(out / written[-1], (json.dumps(metadata.model_dump(), indent=2) + "\n").encode())
    report = validate_submission(out, stem, set(runs[0].test_ids))
    report["warnings"] = warnings
    report["files"] = written
    return report


def check_strategy_implements(run_dir, name: str | None, implemented: list[str] | None, setting: str) -> None:
    """A run is exported under its setting only if its strategy implements that setting (runs made
    before strategies declared their settings are checked against the strategy's declaration now)."""
    from harness.strategy import AGENTS, SETTINGS

    name = name or SETTINGS.get(setting)
    if implemented is None:
        try:
            implemented = list(AGENTS.get(name).settings)
        except HarnessError:
            raise HarnessError(
                f"{run_dir}: cannot tell which settings agent {name!r} implements; it cannot be exported"
            ) from None
    if setting not in implemented:
        raise HarnessError(
            f"{run_dir}: agent {name} does not implement the {setting} setting (it implements: "
            f"{', '.join(implemented)}); it cannot be exported as a {setting} run"
        )
