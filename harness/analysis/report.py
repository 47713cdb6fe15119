"""``harness report RUN_DIR``: one self-contained HTML page of a run (inline CSS and JS, no network):
its metadata and scores, a sortable per-question table, and every transcript with its tool calls,
the titles of the pages and chunks returned, token counts and per-metric scores, and the step records
a strategy declares (a ReAct or IRCoT trace, a delegation tree).

Everything from the dataset or the model is HTML-escaped where it is rendered; the same data is
embedded as JSON in a ``<script type="application/json">`` with ``<``, ``>`` and ``&`` written as
``\\u003c``, ``\\u003e``, ``\\u0026``, so no text can close the script or open a tag.
"""

from __future__ import annotations

import json
from html import escape
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from harness.analysis.leaderboard import is_headline
from harness.analysis.row import Outcomes
from harness.analysis.runs import load_rows
from harness.errors import HarnessError
from harness.execution.record import CostRecord, ModelRecord, RunResults, SampleRow, read_results
from harness.records import write_bytes_atomic
from harness.text import json_text
from harness.strategy import RECORD_KINDS
from harness.scoring.display import display_name, metric_headline
from harness.scoring.results import scale_of
from harness.scoring.scores import Interval, Scores

REPORT_FILE = "report.html"
SHORT = 240  # characters of a question or answer shown in the table (all of it in the transcript)


def _e(value: Any) -> str:
    return escape("" if value is None else str(value), quote=True)


def _json_for_script(data: Any) -> str:
    text = json_text(json.dumps(data, ensure_ascii=False, sort_keys=True))  # a lone surrogate: its escape
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def _short(text: Any, n: int = SHORT) -> str:
    text = "" if text is None else str(text)
    return text if len(text) <= n else text[: n - 1] + "…"


def _fmt(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.4f}"
    return str(value)


def _load_records(run_dir: Path) -> tuple[dict[str, SampleRow], dict[str, SampleRow]]:
    """(finished rows by work key, the last failed attempt of each question's epoch 1), typed; a row
    this harness cannot read is skipped as a run's resume skips it."""
    rows = load_rows(run_dir)
    return rows.finished, {row.id: row for row in rows.failed.values() if row.epoch == 1}


def _dataset_samples(results: RunResults) -> dict[str, Any]:
    """The run's questions by id, when its dataset can still be loaded: the question of a sample
    that never finished, and the reference answer shown in each transcript."""
    from harness.execution.scoring import load_run_dataset

    try:  # as `harness score RUN_DIR` loads it: a --data-path run too, refused if the file changed
        dataset = load_run_dataset(results)
    except HarnessError:
        return {}
    return {s.id: s for s in dataset.samples}


def build_report_data(run_dir: Path) -> dict[str, Any]:
    results = read_results(run_dir)
    finished, failed = _load_records(run_dir)
    by_question = results.scores.per_question() if results.scores is not None else {}  # METRIC.NAME values
    samples = _dataset_samples(results)
    ids = results.sample_ids or list(finished)
    later_epochs: dict[str, list[tuple[int, Any]]] = {}  # --epochs: the other epochs' answers, in the transcript
    for row in finished.values():
        if row.epoch > 1:
            later_epochs.setdefault(row.id, []).append((row.epoch, row.answer))
    rows = []
    for index, qid in enumerate(ids, 1):
        record = finished.get(qid) or failed.get(qid)
        status = "ok" if qid in finished else (f"failed: {failed[qid].error_type}" if qid in failed else "pending")
        extra = record.extra if record is not None else {}
        usage = record.usage if record is not None else None
        rows.append(
            {
                "index": index,
                "id": qid,
                "status": status,
                "outcome": (record.outcome or "answered") if qid in finished else None,
                "question": (record.question if record is not None else None) or getattr(samples.get(qid), "question", None),
                "answer": record.answer if record is not None else None,
                "reference": getattr(samples.get(qid), "answer", None),
                "error": record.error if record is not None else None,
                "scores": dict(by_question.get(qid, {})),
                "prompt_tokens": usage.prompt_tokens if usage else None,
                "completion_tokens": usage.completion_tokens if usage else None,
                "tokens": usage.prompt_tokens + usage.completion_tokens if usage else None,
                "model_calls": record.model_calls if record is not None else None,
                "cache_hits": record.cache_hits if record is not None else None,
                "latency_s": record.latency_s if record is not None else None,
                "cost_usd": record.cost_usd if record is not None else None,
                "searches": len(extra.get("searches", [])) if "searches" in extra else None,
                "truncated_output": record.truncated_output if record is not None else None,
                "epoch_answers": sorted(later_epochs.get(qid, [])),
                "messages": record.transcript() if record is not None else [],
                "extra": extra,
                # breakdown fields (FanOutQA category, QAMPARI type, ...): the report filters on them
                # (a PackedRecord: items() decodes it once, dict() once a key)
                "groups": dict((getattr(samples.get(qid), "groups", None) or {}).items()),
            }
        )
    _add_gold_matches(results, rows, samples)
    score_columns: list[str] = []
    for row in rows:
        score_columns += [k for k in row["scores"] if k not in score_columns and is_headline(k)]
    return {"results": results, "rows": rows, "score_columns": score_columns}


def _add_gold_matches(results: RunResults, rows: list[dict[str, Any]], samples: dict[str, Any]) -> None:
    """Each answered question's gold items under each list metric the run was scored with, matched
    or missed (``harness.scoring.matches``: the metric's own rule, with the run's scoring options)."""
    from harness.scoring.matches import MATCHED_METRICS, answer_matches
    from harness.scoring.metrics import ScoringOptions

    scores = results.scores
    metrics = [m for m in (scores.meta.metrics if scores is not None else []) if m in MATCHED_METRICS]
    if not metrics:
        return
    given = scores.recorded_options("strip_reasoning", "max_answer_chars", "metric_options")
    try:
        options = ScoringOptions.model_validate(given)
    except ValidationError:  # options this harness no longer reads: the defaults
        options = ScoringOptions()
    for row in rows:
        sample = samples.get(row["id"])
        if row["status"] != "ok":
            continue
        if sample is None:
            row["matches_note"] = "the run's dataset could not be loaded: no gold items to show"
            continue
        row["matches"] = answer_matches(metrics, sample.answer, row["answer"], options)


# --------------------------------------------------------------------------- HTML
CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0 auto;max-width:1400px;padding:1em 2em;color:#1a1a1a}
h1{font-size:1.5em;margin:.3em 0}h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.5em 0}th,td{border:1px solid #ddd;padding:3px 7px;vertical-align:top;text-align:left}
th{background:#f4f4f4}table.kv th{width:14em}td.text{min-width:18em}td.id{white-space:nowrap}td.num{text-align:right;font-variant-numeric:tabular-nums}
#questions th{cursor:pointer;user-select:none;white-space:nowrap}#questions th[aria-sort=ascending]::after{content:" ▲"}
#questions th[aria-sort=descending]::after{content:" ▼"}
tr.failed td{background:#fff3f3}tr.pending td{background:#f7f7f7;color:#777}
details.transcript{border:1px solid #ddd;border-radius:4px;margin:.6em 0;padding:.3em .8em}
details.transcript>summary{cursor:pointer;font-weight:600}
.msg{border-left:4px solid #bbb;margin:.5em 0;padding:.2em .6em}.msg .role{font-weight:600;font-size:.85em;text-transform:uppercase;color:#555}
.msg.user{border-color:#4a7bd0}.msg.assistant{border-color:#3a9b5c}.msg.tool{border-color:#c98a1b}.msg.system{border-color:#888}
pre{white-space:pre-wrap;word-break:break-word;background:#fafafa;margin:.2em 0;padding:.4em;max-height:30em;overflow:auto}
.call{background:#fff8e6;padding:.2em .5em;margin:.2em 0}.muted{color:#777}
table.trace td{max-width:40em}table.trace td.num{width:2em}
ul.delegation-tree,ul.delegation-tree ul{list-style:none;padding-left:1.4em;margin:.3em 0}
li.node{border-left:3px solid #8a6bbf;margin:.4em 0;padding:.1em .6em}li.node>.node-head{font-weight:600}
ul.gold-items{list-style:none;padding-left:.6em;margin:.2em 0}ul.gold-items li.matched{color:#17692f}
ul.gold-items li.missed{color:#9b1c1c}ul.gold-items q{color:#1a1a1a;background:#e8f5ec}
"""

SORT_JS = """
(function () {
  var data = JSON.parse(document.getElementById("report-data").textContent);
  var byId = {};
  data.rows.forEach(function (r) { byId[String(r.index)] = r; });
  var table = document.getElementById("question-table");
  var tbody = table.tBodies[0];
  function value(row, key) {
    var r = byId[row.getAttribute("data-index")];
    var v = key.indexOf("score:") === 0 ? r.scores[key.slice(6)] : r[key];
    return v === undefined ? null : v;
  }
  function compare(a, b) {
    if (a === null && b === null) return 0;
    if (a === null) return 1;
    if (b === null) return -1;
    if (typeof a === "number" && typeof b === "number") return a - b;
    return String(a).localeCompare(String(b));
  }
  Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th) {
    th.addEventListener("click", function () {
      var key = th.getAttribute("data-key");
      var dir = th.getAttribute("aria-sort") === "ascending" ? -1 : 1;
      Array.prototype.forEach.call(table.tHead.rows[0].cells, function (o) { o.removeAttribute("aria-sort"); });
      th.setAttribute("aria-sort", dir === 1 ? "ascending" : "descending");
      var rows = Array.prototype.slice.call(tbody.rows);
      rows.sort(function (x, y) {
        var c = compare(value(x, key), value(y, key));
        if (c === 0) c = Number(x.getAttribute("data-index")) - Number(y.getAttribute("data-index"));
        return dir * c;
      });
      rows.forEach(function (row) { tbody.appendChild(row); });
    });
  });
  var selects = document.querySelectorAll("select[data-filter]");
  function matches(r) {
    for (var i = 0; i < selects.length; i++) {
      var key = selects[i].getAttribute("data-filter"), want = selects[i].value;
      if (!want) continue;
      if (key === "status") {
        var status = r.status.indexOf("failed") === 0 ? "failed" : r.status;
        if (status !== want) return false;
      } else if (key === "outcome") {
        if (r.outcome !== want) return false;
      } else {
        var values = (r.groups || {})[key.slice(6)] || [];
        if (values.indexOf(want) < 0) return false;
      }
    }
    return true;
  }
  function applyFilters() {
    var shown = 0;
    Array.prototype.forEach.call(tbody.rows, function (row) {
      var ok = matches(byId[row.getAttribute("data-index")]);
      row.style.display = ok ? "" : "none";
      var t = document.getElementById("t-" + row.getAttribute("data-index"));
      if (t) t.style.display = ok ? "" : "none";
      if (ok) shown++;
    });
    document.getElementById("shown-count").textContent = shown + " of " + tbody.rows.length + " shown";
  }
  Array.prototype.forEach.call(selects, function (s) { s.addEventListener("change", applyFilters); });
  applyFilters();
})();
"""


def _kv_table(pairs: list[tuple[str, Any]]) -> str:
    body = "".join(f"<tr><th>{_e(k)}</th><td>{_e(_fmt(v))}</td></tr>" for k, v in pairs)
    return f'<table class="kv">{body}</table>'


def _meta_section(results: RunResults) -> str:
    model = results.model or ModelRecord()
    cost = results.cost or CostRecord()
    price = cost.price or {}
    counts = results.counts
    outcomes = Outcomes.of(results)
    pairs = [
        ("run id", results.run_id),
        ("status", results.status),
        ("dataset", results.dataset.spec),
        ("setting", results.setting),
        ("agent", results.agent_name),
        ("native tool calling", results.native_tool_calling),
        ("model", results.config.model),
        ("backend", model.backend),
        ("context size", model.context_size),
        ("tokenizer", model.tokenizer),
        ("generation", json.dumps(results.generation, sort_keys=True)),
        ("decoding", results.decoding().label() or None),
        ("search space", results.search_space_label),
        ("model facts", results.decoding().facts),
        ("selected / finished / failed / pending", f"{counts.selected} / {counts.finished} / {counts.failed} / {counts.pending}"),
        ("outcomes", json.dumps(results.outcomes, sort_keys=True)),
        ("answered / without an answer", _answered_text(outcomes)),
        ("tokens prompt / completion", f"{results.tokens.prompt} / {results.tokens.completion}" if results.tokens else None),
        ("reasoning tokens (finished / failed)", f"{results.tokens.reasoning} / {results.tokens.reasoning_failed}" if results.tokens else None),
        ("model calls", results.model_calls),
        ("cost USD (list price, total)", cost.total_usd),
        ("spent USD", cost.spent_usd),
        ("cost note", price.get("reason") or price.get("note")),
        ("started / ended", f"{results.started_at} / {results.ended_at}"),
        ("harness", json.dumps(results.harness.model_dump(mode="json"), sort_keys=True)),
        ("config hash", results.config_hash),
    ]
    if results.retrieval:
        pairs.append(("retrieval", json.dumps(results.retrieval, sort_keys=True)))
    if results.scoring_note:
        pairs.append(("scoring", results.scoring_note))
    return f'<section id="metadata"><h2>Run</h2>{_kv_table(pairs)}</section>'


def _answered_text(outcomes: Outcomes) -> str:
    """``0 of 10 finished / 10 (max_steps 10; 70 of 70 steps unreadable)``."""
    return f"{outcomes.answered} of {outcomes.finished} finished / {outcomes.cell()}"


def _outcome_note(results: RunResults) -> str:
    """Above the numbers: how many samples ended without an answer, why, and how they are scored."""
    note = Outcomes.of(results).note()
    return f'<p class="call" id="no-answer">{_e(note)}</p>' if note else ""


def _scores_section(results: RunResults) -> str:
    scores = results.scores or Scores()
    values = scores.score_values()
    if not values:
        return '<section id="scores"><h2>Scores</h2><p class="muted">No scores (see scoring above).</p></section>'
    said = _outcome_note(results)
    errors = scores.intervals()
    counts = scores.count_values()
    counted = f"<h3>Counts</h3>{_kv_table(list(counts.items()))}" if counts else ""
    if not errors:  # a results file from before the error bars: as it was (harness score RUN adds them)
        rows = [(f"{k} ({scale_of(k)})", v) for k, v in values.items()]
        return f'<section id="scores"><h2>Scores</h2>{said}{_kv_table(rows)}{counted}</section>'
    head = "<tr><th>metric</th><th>value</th><th>± stderr</th><th>95% interval</th><th>method</th></tr>"
    body = []
    for name, value in values.items():
        e = errors.get(name) or Interval()
        ci = e.ci95
        method = e.method or ""
        if e.n_clusters:
            method += f" ({e.n_clusters} clusters)"
        na = "n/a" if e.note else ""  # no spread to estimate: said, never ± 0
        cells = [_fmt(value), na if e.stderr is None else _fmt(e.stderr)]
        cells.append(f"[{_fmt(ci[0])}, {_fmt(ci[1])}]" if ci else na)
        cells.append(f"{method}; {e.note}" if e.note else method)
        label = f"{name} ({scale_of(name)})"
        body.append(f"<tr><th>{_e(label)}</th>" + "".join(f'<td class="num">{_e(c)}</td>' for c in cells) + "</tr>")
    clustered_by = scores.cluster_by
    note = f'<p class="muted">errors clustered by {_e(clustered_by)}</p>' if clustered_by else ""
    return (
        f'<section id="scores"><h2>Scores</h2>{said}<table class="kv scores">{head}{"".join(body)}</table>{note}'
        f"{counted}</section>"
    )


def _figure_section(results: RunResults) -> str:
    """The run's headline scores with their 95% intervals (``harness figure scores``), as inline
    SVG: drawn here, nothing fetched. None without scores."""
    from harness.analysis.figures import figure_svg, scores_spec

    if (results.scores is None or not results.scores.score_values()) and results.counts.finished:
        return ""
    try:
        spec = scores_spec([(results.run_id, results)])
    except HarnessError:  # no headline metric to draw
        return ""
    return f'<section id="figures"><h2>Figure</h2><div style="overflow-x:auto">{figure_svg(spec)}</div></section>'


def _effort_section(results: RunResults, rows: list[dict[str, Any]]) -> str:
    """The headline against the searches (where recorded) and tokens each question took (``harness
    figure effort``), as inline SVG; nothing without a binnable headline or recorded effort."""
    from harness.analysis.figures import effort_of_rows, effort_spec, figure_svg

    spent = effort_of_rows(
        {"id": r["id"], "extra": r["extra"], "model_calls": r["model_calls"], "cache_hits": r["cache_hits"],
         "cost_usd": r["cost_usd"], "usage": {"prompt_tokens": r["prompt_tokens"], "completion_tokens": r["completion_tokens"]}}
        for r in rows if r["status"] == "ok"
    )  # fmt: skip
    if not spent:
        return ""
    axes = ["searches", "tokens"] if any(v["searches"] is not None for v in spent.values()) else ["tokens"]
    try:
        spec = effort_spec([(results.run_id, results, spent)], axes=axes)
    except HarnessError:  # no headline metric, or one that is no mean of per-question values
        return ""
    if not any(line.points for panel in spec.panels for line in panel.lines):
        return ""
    return (
        '<section id="effort"><h2>Effort</h2><p class="muted">the headline by what each question spent (bins: 0, '
        f'then doublings; 95% intervals)</p><div style="overflow-x:auto">{figure_svg(spec)}</div></section>'
    )


def _breakdown_section(results: RunResults) -> str:
    """One table per breakdown group (FanOutQA category, QAMPARI type, QUEST template/domain,
    TopiOCQA turn type): each value's n and headline means."""
    groups = results.scores.breakdown_values() if results.scores is not None else {}
    if not groups:
        return ""
    parts = ['<section id="breakdowns"><h2>Breakdowns</h2>']
    for group, values in groups.items():
        columns = list(dict.fromkeys(k for entry in values.values() for k in entry if k != "n" and is_headline(k)))
        head = "<tr><th>" + _e(group) + "</th><th>n</th>" + "".join(f"<th>{_e(c)}</th>" for c in columns) + "</tr>"
        body = []
        for value, entry in sorted(values.items(), key=lambda kv: (-(kv[1].get("n") or 0), kv[0])):
            cells = "".join(f'<td class="num">{_e(_fmt(entry.get(c)))}</td>' for c in columns)
            body.append(f'<tr><th>{_e(value)}</th><td class="num">{_e(entry.get("n"))}</td>{cells}</tr>')
        parts.append(f'<table class="breakdown" data-group="{_e(group)}">{head}{"".join(body)}</table>')
    parts.append("</section>")
    return "".join(parts)


def _filters(rows: list[dict[str, Any]]) -> str:
    """Select boxes over the question table: status, outcome and each breakdown field."""
    def options(values: list[str]) -> str:
        return '<option value="">all</option>' + "".join(f'<option value="{_e(v)}">{_e(v)}</option>' for v in values)

    status = sorted({"failed" if r["status"].startswith("failed") else r["status"] for r in rows})
    outcomes = sorted({r["outcome"] for r in rows if r["outcome"]})
    boxes = [("status", status), ("outcome", outcomes)]
    fields = list(dict.fromkeys(f for r in rows for f in r["groups"]))
    boxes += [(f"group:{f}", sorted({v for r in rows for v in r["groups"].get(f, [])})) for f in fields]
    html = "".join(
        f'<label>{_e(key.removeprefix("group:"))} <select data-filter="{_e(key)}">{options(values)}</select></label> '
        for key, values in boxes
    )
    return f'<p class="filters">Show: {html}<span id="shown-count"></span></p>'


def _question_table(rows: list[dict[str, Any]], score_columns: list[str]) -> str:
    columns = [("index", "#"), ("id", "id"), ("status", "status"), ("outcome", "outcome")]
    columns += [("question", "question"), ("answer", "answer")]
    columns += [(f"score:{c}", c) for c in score_columns]
    columns += [("tokens", "tokens"), ("model_calls", "calls"), ("searches", "searches")]
    columns += [("latency_s", "latency s"), ("cost_usd", "cost USD")]
    head = "".join(f'<th data-key="{_e(k)}" scope="col">{_e(label)}</th>' for k, label in columns)
    body = []
    for r in rows:
        cls = "failed" if r["status"].startswith("failed") else ("pending" if r["status"] == "pending" else "")
        cells = [
            f'<td class="num">{r["index"]}</td>',
            f'<td class="id"><a href="#t-{r["index"]}">{_e(r["id"])}</a></td>',
            f"<td>{_e(r['status'])}</td>",
            f"<td>{_e(r['outcome'] or '')}</td>",
            f'<td class="text" title="{_e(r["question"])}">{_e(_short(r["question"]))}</td>',
            f'<td class="text" title="{_e(r["answer"])}">{_e(_short(r["answer"]))}</td>',
        ]
        cells += [f'<td class="num">{_e(_fmt(r["scores"].get(c)))}</td>' for c in score_columns]
        for key in ("tokens", "model_calls", "searches", "latency_s", "cost_usd"):
            cells.append(f'<td class="num">{_e(_fmt(r[key]))}</td>')
        body.append(f'<tr class="{cls}" data-index="{r["index"]}" data-id="{_e(r["id"])}">{"".join(cells)}</tr>')
    return (
        '<section id="questions"><h2>Questions</h2><p class="muted">Click a column header to sort; choose '
        "below to filter (the transcripts follow).</p>"
        f"{_filters(rows)}"
        f'<table id="question-table"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></section>'
    )


def _pretty_arguments(arguments: Any) -> str:
    try:
        return json.dumps(json.loads(arguments), indent=2, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(arguments)


def _message_html(m: dict[str, Any]) -> str:
    role = str(m.get("role", "?"))
    content = m.get("content")
    if isinstance(content, list):
        content = "\n".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    parts = [f'<div class="role">{_e(role)}</div>']
    if m.get("tool_call_id"):
        parts.append(f'<div class="muted">result of tool call {_e(m["tool_call_id"])}</div>')
    if content:
        parts.append(f"<pre>{_e(content)}</pre>")
    for call in m.get("tool_calls") or []:
        fn = call.get("function") or {}
        parts.append(
            f'<div class="call">tool call <b>{_e(fn.get("name"))}</b> <span class="muted">{_e(call.get("id"))}</span>'
            f"<pre>{_e(_pretty_arguments(fn.get('arguments')))}</pre></div>"
        )
    css_role = role if role in ("user", "assistant", "tool", "system") else "other"
    return f'<div class="msg {css_role}">{"".join(parts)}</div>'


def _record_kinds(results: RunResults) -> set[str]:
    """The shared record kinds the run's strategy declared; a run from before strategies declared
    them: every kind (their shapes have not changed)."""
    declared = results.agent.records if results.agent is not None else None
    return set(RECORD_KINDS) if declared is None else set(declared) & set(RECORD_KINDS)


def _retrieval_html(extra: dict[str, Any], kinds: set[str]) -> str:
    """The shared records (``harness.strategy.RECORD_KINDS``) the run's strategy declares it writes."""
    out = []
    if "searches" in kinds and extra.get("searches"):
        items = []
        for s in extra["searches"]:
            found = s.get("found_title")
            if found:
                what = "whole page" if s.get("whole_page") else f"{s.get('fragments', 0)} chunk(s)"
                if s.get("truncated"):
                    what += ", cut to fit"
                desc = f"<b>{_e(found)}</b> ({_e(what)}, {_e(s.get('tokens'))} tokens)"
            else:
                similar = ", ".join(s.get("similar_titles") or [])
                desc = f'<span class="muted">not found; similar: {_e(similar)}</span>'
            items.append(f"<li>query <code>{_e(s.get('query'))}</code> → {desc}</li>")
        out.append(f'<div><b>Searches</b><ol class="searches">{"".join(items)}</ol></div>')
    recall = extra.get("evidence_recall") if "evidence_recall" in kinds else None
    if recall and recall.get("recall") is not None:
        out.append(
            f"<div>evidence recall {_e(_fmt(recall['recall']))}: found {_e(', '.join(recall.get('found', [])))} "
            f"of {_e(', '.join(recall.get('needed', [])))}</div>"
        )
    evidence = extra.get("evidence") if "evidence" in kinds else None
    if evidence:
        titles = ", ".join(evidence.get("packed_titles") or [])
        out.append(
            f"<div><b>Evidence packed</b>: {_e(evidence.get('chunks_packed'))} of {_e(evidence.get('chunks_total'))} "
            f"chunks, {_e(evidence.get('prompt_tokens'))} tokens{' (cut)' if evidence.get('cut') else ''}; "
            f'titles: <span class="chunk-titles">{_e(titles)}</span></div>'
        )
    return "".join(out)


def _titles(titles: Any) -> str:
    return ", ".join(str(t) for t in titles) if isinstance(titles, list) else ""


def _react_row(s: dict[str, Any]) -> str:
    """One ReAct step: Thought, Action, and what the harness answered (the observation's titles)."""
    action, notes = s.get("action"), []
    if action == "search":
        act = f"Search[{_e(s.get('query'))}]"
        found = _titles(s.get("observation_titles"))
        obs = (
            f'page <b class="observation-title">{_e(found)}</b>'
            if found
            else f'<span class="muted">no such page; similar: {_e(_titles(s.get("similar_titles")))}</span>'
        )
    elif action == "finish":
        act, obs = f"Finish[{_e(s.get('answer'))}]", '<span class="muted">(the answer)</span>'
    else:
        act = f'<span class="muted">invalid step: {_e(s.get("error"))}</span>'
        obs = '<span class="muted">a correction</span>'
        if s.get("reply"):
            notes.append(f"<details><summary>reply</summary><pre>{_e(s['reply'])}</pre></details>")
    if s.get("cut_at_max_tokens"):
        notes.append('<div class="muted">reply cut at max tokens</div>')
    if s.get("dropped_after_action"):
        notes.append('<div class="muted">text after the action dropped</div>')
    return (
        f'<tr class="step" data-step="{_e(s.get("step"))}"><td class="num">{_e(s.get("step"))}</td>'
        f'<td class="thought">{_e(s.get("thought"))}</td><td class="action">{act}{"".join(notes)}</td>'
        f'<td class="observation">{obs}</td></tr>'
    )


def _ircot_row(s: dict[str, Any]) -> str:
    """One IRCoT step: its sentence, the query it retrieved with and the new passages' titles."""
    sentence = s.get("sentence")
    said = _e(sentence) if sentence is not None else '<span class="muted">(the question retrieves)</span>'
    new = s.get("new_titles")
    passages = f"{len(new)}: {_e(_titles(new))}" if isinstance(new, list) else ""
    notes = []
    if s.get("answer") is not None:
        notes.append(f"answer: <b>{_e(s['answer'])}</b>")
    if s.get("passages_shown") is not None:
        notes.append(f"{_e(s['passages_shown'])} passages shown")
    for key, label in (
        ("cut", "did not fit"),
        ("over_cap", "over max_passages"),
        ("repeated_sentences_skipped", "repeats skipped"),
    ):
        if s.get(key):
            notes.append(f"{_e(s[key])} {label}")
    if "reply" in s:
        notes.append(f"no new sentence<details><summary>reply</summary><pre>{_e(s['reply'])}</pre></details>")
    return (
        f'<tr class="step" data-step="{_e(s.get("step"))}"><td class="num">{_e(s.get("step"))}</td>'
        f'<td class="sentence">{said}</td><td class="query">{_e(s.get("query"))}</td>'
        f'<td class="new-titles">{passages}</td><td class="muted">{"; ".join(notes)}</td></tr>'
    )


def _as_json(cls: str, label: str, value: Any) -> str:
    """A record of a shape the report does not draw."""
    return f'<div class="{cls}"><b>{label}</b><pre>{_e(json.dumps(value, indent=2, ensure_ascii=False))}</pre></div>'


def _trace_html(trace: Any) -> str:
    """A ReAct trace as numbered Thought / Action / Observation rows, an IRCoT trace as its steps;
    another shape as JSON."""
    steps = trace if isinstance(trace, list) and all(isinstance(s, dict) for s in trace) else None
    if not steps:
        return _as_json("trace", "Trace", trace) if trace else ""
    if any("action" in s or "thought" in s for s in steps):
        head = "<th>#</th><th>Thought</th><th>Action</th><th>Observation</th>"
        kind, rows = "react-trace", "".join(_react_row(s) for s in steps)
    elif any("sentence" in s for s in steps):
        head = "<th>#</th><th>sentence</th><th>query</th><th>new passages</th><th>notes</th>"
        kind, rows = "ircot-trace", "".join(_ircot_row(s) for s in steps)
    else:
        return _as_json("trace", "Trace", steps)
    return (
        f'<div class="trace"><b>Trace</b> ({len(steps)} steps)<table class="trace {kind}">'
        f"<thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></div>"
    )


def _node_html(n: dict[str, Any]) -> str:
    """A delegation node's own part (its children follow): id, depth, outcome, usage, instructions,
    answer, and its messages folded."""
    tokens = n.get("tokens") if isinstance(n.get("tokens"), dict) else {}
    facts = [f"depth {_e(n.get('depth'))}", f'<span class="outcome">{_e(n.get("outcome"))}</span>']
    facts.append(f"tokens {_e(tokens.get('prompt_tokens'))} / {_e(tokens.get('completion_tokens'))}")
    facts.append(f"cost USD {_e(_fmt(n.get('cost')))}")
    if n.get("searches") is not None:
        facts.append(f"searches {_e(n.get('searches'))}")
    messages = [m for m in n["messages"] if isinstance(m, dict)] if isinstance(n.get("messages"), list) else []

    def labelled(cls: str, label: str, text: Any) -> str:
        return f'<div class="{cls}"><span class="muted">{label}</span><pre>{_e(text)}</pre></div>'

    return (
        f'<div class="node-head"><span class="node-id">{_e(n.get("id"))}</span> · {" · ".join(facts)}</div>'
        + labelled("instructions", "instructions", n.get("instructions"))
        + ("" if n.get("answer") is None else labelled("node-answer", "answer", n["answer"]))
        + f'<details class="node-messages"><summary>messages ({len(messages)})</summary>'
        f'{"".join(_message_html(m) for m in messages)}</details>'
    )


def _delegation_html(tree: Any) -> str:
    """The delegation tree as nested lists, each node under its parent (a node whose parent is
    missing, or in a loop, at the top). Built without recursion: the data sets the depth."""
    if not isinstance(tree, dict) or not isinstance(tree.get("nodes"), list):
        return _as_json("delegation", "Delegation", tree) if tree else ""
    nodes = [n for n in tree["nodes"] if isinstance(n, dict)]
    ids = {str(n.get("id")) for n in nodes}
    children: dict[str, list[dict[str, Any]]] = {}
    for n in nodes:
        if n.get("parent") is not None and str(n["parent"]) in ids:
            children.setdefault(str(n["parent"]), []).append(n)
    seen: set[int] = set()
    out: list[str] = []
    for top in [n for n in nodes if n.get("parent") is None or str(n["parent"]) not in ids] + nodes:
        stack: list[Any] = [top]
        while stack:
            item = stack.pop()
            if isinstance(item, str):
                out.append(item)
                continue
            if id(item) in seen:
                continue
            seen.add(id(item))
            out.append(f'<li class="node" data-node="{_e(item.get("id"))}">{_node_html(item)}')
            kids = [c for c in children.get(str(item.get("id")), []) if id(c) not in seen]
            if kids:
                out.append('<ul class="children">')
                stack.append("</ul></li>")
                stack.extend(reversed(kids))
            else:
                out.append("</li>")
    facts = [(k, tree.get(k)) for k in ("subagents", "depth", "refused_delegations") if tree.get(k) is not None]
    said = ", ".join(f"{k.replace('_', ' ')} {_e(v)}" for k, v in facts)
    return (
        f'<div class="delegation"><b>Delegation tree</b>{f" ({said})" if said else ""}'
        f'<ul class="delegation-tree">{"".join(out)}</ul></div>'
    )


def _steps_html(extra: dict[str, Any], kinds: set[str]) -> str:
    """The shared step records: a multi-step strategy's trace, a delegation tree."""
    out = []
    if "trace" in kinds and extra.get("trace"):
        out.append(_trace_html(extra["trace"]))
    if "delegation" in kinds and extra.get("delegation"):
        out.append(_delegation_html(extra["delegation"]))
    return "".join(out)


def _matches_html(r: dict[str, Any]) -> str:
    """Per list metric: each gold item matched (green, with the part of the answer that matched it)
    or missed (red)."""
    if r.get("matches_note"):
        return f'<p class="muted gold-matches">{_e(r["matches_note"])}</p>'
    blocks = []
    for metric, items in (r.get("matches") or {}).items():
        found = sum(1 for g in items if g.matched)
        headline = metric_headline(metric)
        label = display_name(headline[0]) if headline else metric
        lines = []
        for g in items:
            if g.matched:
                lines.append(
                    f'<li class="matched"><span class="mark">✓ matched</span> <span class="gold">{_e(g.item)}</span>'
                    f' ← <q class="matched-text">{_e(g.matched_text)}</q></li>'
                )
            else:
                lines.append(f'<li class="missed"><span class="mark">✗ missed</span> <span class="gold">{_e(g.item)}</span></li>')
        blocks.append(
            f'<div class="gold-match" data-metric="{_e(metric)}" data-matched="{found}" data-gold="{len(items)}">'
            f"<b>{_e(label)}</b> <span class=\"muted\">({_e(metric)})</span>: {found} of {len(items)} gold items matched"
            f'<ul class="gold-items">{"".join(lines)}</ul></div>'
        )
    if not blocks:
        return ""
    return f'<div class="gold-matches"><h3>Gold items</h3>{"".join(blocks)}</div>'


def _transcript(r: dict[str, Any], kinds: set[str]) -> str:
    summary = f"#{r['index']} {_e(r['id'])} — {_e(r['status'])} — {_e(_short(r['answer'], 120))}"
    facts = [
        ("question", r["question"]),
        ("answer", r["answer"]),
        ("reference", json.dumps(r["reference"], ensure_ascii=False) if r["reference"] is not None else None),
        ("outcome", r["outcome"]),
        ("error", r["error"]),
        ("tokens prompt / completion", f"{r['prompt_tokens']} / {r['completion_tokens']}"),
        ("model calls / cache hits", f"{r['model_calls']} / {r['cache_hits']}"),
        ("latency s", r["latency_s"]),
        ("cost USD", r["cost_usd"]),
        ("answer cut at max tokens", r["truncated_output"]),
    ]
    facts += [(f"answer of epoch {epoch}", answer) for epoch, answer in r.get("epoch_answers", [])]
    facts += [(f"score {k}", v) for k, v in r["scores"].items()]
    facts = [(k, v) for k, v in facts if v is not None]
    messages = "".join(_message_html(m) for m in r["messages"])
    rest = {k: v for k, v in r["extra"].items() if k not in kinds}
    extra = (
        f"<details><summary>other records</summary><pre>{_e(json.dumps(rest, indent=2, ensure_ascii=False))}</pre></details>"
        if rest
        else ""
    )
    return (
        f'<details class="transcript" id="t-{r["index"]}" data-id="{_e(r["id"])}"><summary>{summary}</summary>'
        f"{_kv_table(facts)}{_matches_html(r)}{_retrieval_html(r['extra'], kinds)}{_steps_html(r['extra'], kinds)}<h3>Transcript</h3>"
        f"{messages or '<p class=muted>No transcript recorded.</p>'}{extra}</details>"
    )


def render_report(data: dict[str, Any]) -> str:
    results, rows = data["results"], data["rows"]
    kinds = _record_kinds(results)
    title = f"{results.config.model} · {results.setting} · {results.dataset.spec}"
    embedded = {
        "run_id": results.run_id,
        "score_columns": data["score_columns"],
        "rows": [{k: v for k, v in r.items() if k not in ("messages", "extra", "matches")} for r in rows],
    }
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
        "script-src 'unsafe-inline'\">"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(title)} — run {_e(results.run_id)}</title><style>{CSS}</style></head><body>"
        f"<h1>{_e(title)}</h1>{_space_banner(results)}"
        f"{_meta_section(results)}{_scores_section(results)}{_figure_section(results)}{_effort_section(results, rows)}"
        f"{_breakdown_section(results)}"
        f"{_question_table(rows, data['score_columns'])}"
        f'<section id="transcripts"><h2>Transcripts</h2>{"".join(_transcript(r, kinds) for r in rows)}</section>'
        f'<script type="application/json" id="report-data">{_json_for_script(embedded)}</script>'
        f"<script>{SORT_JS}</script></body></html>\n"
    )


def _space_banner(results: RunResults) -> str:
    """Under the title, where the numbers were searched over; said plainly when it was an evidence-only space."""
    space = results.search_space
    if space is None:
        return ""
    if space.evidence_only:
        return (
            f'<p class="call" id="search-space"><b>Search space {_e(space.label)}</b>: the strategy searched the '
            "dataset's own evidence pages or contexts (every similar title a gold page); these numbers are not "
            "open-book over Wikipedia.</p>"
        )
    return f'<p class="muted" id="search-space">Search space {_e(space.label)}</p>'


def write_report(run_dir: str | Path, out: str | Path | None = None) -> Path:
    run_dir = Path(run_dir)
    out = Path(out) if out else run_dir / REPORT_FILE
    html = render_report(build_report_data(run_dir))
    write_bytes_atomic(out, html)
    return out
