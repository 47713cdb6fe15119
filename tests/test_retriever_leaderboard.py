"""``harness retrieval-eval --out-dir`` writes a typed retrieval record that ``harness leaderboard``
lists as retriever rows, apart from the runs, each value with its interval; nDCG@K and recall@K equal
trec_eval's (``pytrec_eval``, the C trec_eval that BrowseComp-Plus's ``pyserini.eval.trec_eval`` runs)
on a real snapshot of HotpotQA's paragraphs (tests/fixtures) and on generated rankings."""

import json
import math
import random
from pathlib import Path

import numpy as np
import pytest
from scripted_runs import scripted_run

from harness.cli import main
from harness.datasets import load_dataset
from harness.execution.record import json_schema, read_retrieval
from harness.scoring.retrieval_metrics import ndcg_at_k, recall_at_k

HOTPOT = Path(__file__).parent / "fixtures" / "hotpot_dev_distractor_first100.json"
N = 12  # questions: their paragraphs make the snapshot, whole pages the passages (no sentencizer: fast)


def wilson(successes: float, n: int, z: float = 1.959963984540054) -> list[float]:
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return [centre - half, centre + half]


def harness(capsys, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    base = tmp_path_factory.mktemp("retrievers")
    pages: dict[str, str] = {}
    for q in json.loads(HOTPOT.read_text())[:N]:
        for title, sentences in zip(q["context"]["title"], q["context"]["sentences"]):
            pages.setdefault(title, "".join(sentences))
    (base / "pages.json").write_text(json.dumps([{"title": t, "text": x} for t, x in pages.items()]))
    snap = base / "hotpot.db"
    assert main(["snapshot", "build", "--from", str(base / "pages.json"), "--out", str(snap), "--quiet"]) == 0
    args = ["--passages", "page", "--workers", "1", "--quiet"]
    assert main(["index", "build", str(snap), "--kind", "bm25", *args]) == 0
    return base, snap


def evaluate(capsys, world, folder: str, *extra: str):
    base, snap = world
    out = base / "boards" / folder
    argv = ["retrieval-eval", "--dataset", "hotpotqa:dev", "--snapshot", str(snap), "--passages", "page"]
    code, table, err = harness(capsys, *argv, "--limit", str(N), "--k", "1,2,5", "--out-dir", str(out), *extra)
    assert code == 0, err
    return out, table


def test_record_values_are_trec_evals_with_intervals(capsys, world):
    pytrec_eval = pytest.importorskip("pytrec_eval")
    out, table = evaluate(capsys, world, "bm25")
    record = read_retrieval(out)  # the typed record, from the folder
    assert record.kind == "retrieval" and record.retriever == "bm25" and record.ks == [1, 2, 5]
    assert record.ndcg_k == 10 and record.metric_info["ndcg"]["gain"] == "binary"
    assert record.dataset.spec == "hotpotqa:dev@distractor-first100" and record.dataset.n_selected == N
    assert record.snapshot.content_sha256 and record.index["bm25"]["options"]["k1"] == 0.9
    space = record.search_space  # what was searched, and how much of it is the questions' gold
    assert space.pages == 120 and space.gold_pages == 24 and space.label.endswith("120 pages (gold 20%)")
    # what trec_eval says of the same rankings (pages, best first) against the gold pages (grade 1)
    samples = {s.id: s for s in load_dataset("hotpotqa:dev").samples[:N]}
    run, qrels = {}, {}
    for q in record.per_question:
        titles = [title for _, title, _ in q.hits]
        assert len(set(titles)) == len(titles)  # --passages page: one passage a page
        run[q.id] = {t: float(len(titles) - i) for i, t in enumerate(titles)}  # no ties: rank order kept
        qrels[q.id] = {t: 1 for t in samples[q.id].needed_titles}
    measures = {"recall.1,2,5", "ndcg_cut.10"}
    trec = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)
    for k in (1, 2, 5):
        column = [trec[qid][f"recall_{k}"] for qid in run]
        assert record.metrics["page_recall"][str(k)] == pytest.approx(np.mean(column))
        # a mean in [0, 1]: the normal interval of the per-question values
        entry = record.uncertainty[f"page_recall@{k}"]
        se = np.std(column, ddof=1) / math.sqrt(len(column))
        assert entry.method == "analytic" and entry.stderr == pytest.approx(se)
        assert entry.ci95[0] == pytest.approx(max(0.0, np.mean(column) - 1.959964 * se), abs=1e-6)
        # all_pages is a share of 0/1 values: Wilson's interval (its formula, Wilson 1927)
        every = [float(trec[qid][f"recall_{k}"] == 1.0) for qid in run]
        share = record.uncertainty[f"all_pages@{k}"]
        assert share.method == "wilson" and record.metrics["all_pages"][str(k)] == pytest.approx(np.mean(every))
        assert share.ci95 == pytest.approx(wilson(sum(every), len(every)), abs=1e-6)
    ndcg = [trec[qid]["ndcg_cut_10"] for qid in run]
    assert 0 < np.mean(ndcg) < 1 and record.metrics["ndcg"]["10"] == pytest.approx(np.mean(ndcg))
    assert [q.values["ndcg"]["10"] for q in record.per_question] == pytest.approx(ndcg)
    assert record.uncertainty["ndcg@10"].kind == {"name": "mean", "scale": 1.0}
    # the table printed as before, nDCG on a line of its own
    assert f"| page_recall | {N} | {record.metrics['page_recall']['1']:.4f} |" in table
    assert f"ndcg@10 (binary gain, trec_eval ndcg_cut, over distinct pages): {np.mean(ndcg):.4f} [95% " in table
    # the file is what `harness schema retrieval` describes
    import jsonschema

    data = json.loads((out / "retrieval.json").read_text())
    jsonschema.validate(data, json_schema("retrieval"))


def test_ndcg_and_recall_equal_trec_eval_on_generated_rankings():
    pytrec_eval = pytest.importorskip("pytrec_eval")
    rng = random.Random(42)
    run, qrels, ours = {}, {}, {}
    for q in range(300):
        docs = [f"d{i}" for i in range(rng.randint(1, 40))]
        ranked = rng.sample(docs, rng.randint(0, len(docs)))
        gold = rng.sample(docs, rng.randint(1, min(12, len(docs))))
        grades = {d: rng.choice([1, 1, 2, 3]) if q % 2 else 1 for d in gold}  # binary, and graded
        qid = f"q{q}"
        run[qid] = {d: float(len(ranked) - i) for i, d in enumerate(ranked)}
        qrels[qid] = grades
        ours[qid] = (ranked, grades)
    trec = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.5,10", "recall.5,100"}).evaluate(run)
    for qid, (ranked, grades) in ours.items():
        got = trec.get(qid, {"ndcg_cut_5": 0.0, "ndcg_cut_10": 0.0, "recall_5": 0.0, "recall_100": 0.0})
        for k in (5, 10):  # trec_eval leaves a query with an empty ranking out; its value is 0 (-c)
            assert ndcg_at_k(ranked, {d: float(g) for d, g in grades.items()}, k) == pytest.approx(got[f"ndcg_cut_{k}"])
        for k in (5, 100):
            assert recall_at_k(ranked, grades, k) == pytest.approx(got[f"recall_{k}"])
    with pytest.raises(ValueError, match="distinct"):
        ndcg_at_k(["a", "a"], {"a": 1.0}, 10)


@pytest.mark.slow  # two evaluations and a scripted run: about 6 s on a loaded machine
def test_leaderboard_lists_retrievers_apart_from_runs(capsys, world, tmp_path):
    base, _ = world
    evaluate(capsys, world, "bm25")
    evaluate(capsys, world, "bm25-by-type", "--cluster-by", "type")
    scripted_run(base / "boards" / "run", "ret-yes", lambda *a: "yes", "hotpotqa:dev", 2)
    (base / "boards" / "broken").mkdir(exist_ok=True)
    (base / "boards" / "broken" / "retrieval.json").write_text('{"kind": "retrieval", "retriever": "bm25"}')
    board_file = tmp_path / "board.json"
    code, markdown, err = harness(capsys, "leaderboard", str(base / "boards"), "--out", str(board_file))
    assert code == 0, err
    board = json.loads(board_file.read_text())
    # the run is a run row; the two evaluations retriever rows, never in the runs' list
    assert [r["setting"] for r in board["rows"]] == ["closed-book"]
    assert [Path(r["path"]).name for r in board["retrievers"]] == ["bm25", "bm25-by-type"]
    assert not any("page_recall" in m or "ndcg" in m for m in board["metrics"])
    assert board["retriever_metrics"][:3] == ["page_recall@1", "page_recall@2", "page_recall@5"]
    assert "ndcg@10" in board["retriever_metrics"]
    row = board["retrievers"][0]
    record = read_retrieval(base / "boards" / "bm25")
    assert row["metrics"]["page_recall@5"] == record.metrics["page_recall"]["5"]
    assert row["ci95"]["ndcg@10"] == record.uncertainty["ndcg@10"].ci95
    assert row["config"] == "bm25 lucene k1=0.9 b=0.4" and row["passages"] == "page"
    assert row["snapshot_sha256"] == record.snapshot.content_sha256 and row["search_space"]["pages"] == 120
    # clustered by HotpotQA's question type: the same values, a cluster-robust interval
    clustered = board["retrievers"][1]
    assert clustered["metrics"] == row["metrics"] and clustered["cluster_by"] == "type"
    assert clustered["uncertainty_method"]["page_recall@5"] == "analytic-clustered"
    # an unreadable record is passed over with the reason, in one line
    broken = [s for s in board["skipped"] if s["path"].endswith("broken")]
    assert len(broken) == 1 and "retrieval.json: field" in broken[0]["reason"]
    # markdown: the runs' table, then the retrievers' own
    runs_part, retrievers_part = markdown.split("## Retrievers (harness retrieval-eval: no reader)")
    assert "page_recall" not in runs_part and "closed-book" not in retrievers_part
    value = f"{row['metrics']['ndcg@10']:.4f} ± {row['stderr']['ndcg@10']:.4f}"
    assert value in retrievers_part and "| bm25 lucene k1=0.9 b=0.4 | page |" in retrievers_part


def test_a_metric_without_gold_is_na_with_the_reason(capsys, world, tmp_path):
    """TopiOCQA turns whose pages the snapshot lacks: every value n/a with why, never 0."""
    _, snap = world
    out = tmp_path / "topi"
    argv = ["retrieval-eval", "--dataset", "topiocqa:dev", "--snapshot", str(snap), "--passages", "page"]
    code, table, err = harness(capsys, *argv, "--limit", "3", "--k", "5", "--out-dir", str(out))
    assert code == 0, err
    assert "n/a (no question with a gold page in the snapshot)" in table
    code, markdown, err = harness(capsys, "leaderboard", str(tmp_path))
    assert code == 0, err
    line = next(x for x in markdown.splitlines() if x.startswith("| topiocqa:dev"))
    assert line.split(" | ").count("n/a") == 3  # page_hit@5, answer_hit@5, ndcg@10
    from harness.analysis.leaderboard import build_leaderboard

    row = build_leaderboard(tmp_path).retrievers[0]
    assert row.metrics["ndcg@10"] is None and "gold page in the snapshot" in row.null_reasons["ndcg@10"]
    assert row.skipped == {"gold page not in the snapshot": 3}


def test_out_keeps_the_old_keys_and_out_dir_is_never_a_run_folder(capsys, world, tmp_path):
    _, snap = world
    argv = ["retrieval-eval", "--dataset", "hotpotqa:dev", "--snapshot", str(snap), "--passages", "page"]
    argv += ["--limit", "2"]
    code, _, err = harness(capsys, *argv, "--out", str(tmp_path / "r.json"), "--out-dir", str(tmp_path / "d"))
    assert code == 0, err
    flat = json.loads((tmp_path / "r.json").read_text())
    assert flat == json.loads((tmp_path / "d" / "retrieval.json").read_text())  # one record, two places
    before = {"dataset_name", "retriever", "passages", "question_representation", "ks", "n_questions", "n_evaluated"}
    before |= {"skipped", "gold_coverage", "metric_names", "metrics", "metric_counts", "metric_info", "metric_options"}
    before |= {"timing", "per_question", "dataset", "snapshot", "index"}  # what --out wrote before the record
    assert before <= set(flat) and {"spec", "sha256", "n_selected"} <= set(flat["dataset"])
    run_dir = tmp_path / "a-run"
    run_dir.mkdir()
    (run_dir / "results.json").write_text("{}")
    code, _, err = harness(capsys, *argv, "--out-dir", str(run_dir))
    assert code == 2 and "a run's folder (results.json)" in err and len(err.strip().splitlines()) == 1
    assert not (run_dir / "retrieval.json").exists()
