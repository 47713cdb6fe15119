"""harness.tools.search.SearchTool: FanOutQA's open-book search over a snapshot, on real Wikipedia text.

The snapshot here is a small in-memory stand-in with the two methods the tool uses, filled with
the 10 full articles of tests/fixtures/wikipedia_en_science_physics_10.json and HotpotQA
paragraphs; one test uses a real ``harness.wiki_snapshot.Snapshot`` file. Tokens are counted with a real
tokenizer (tiktoken o200k_base, offline).
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.models.tokenizers import count_tiktoken
from harness.scoring.normalize import tokenize_fanoutqa
from harness.tools import TOOLS, tool_schema
from harness.tools.search import SearchConfig, SearchResult, SearchTool, rank_chunks
from harness.wiki_snapshot.chunking import chunk_text
from harness.wiki_snapshot.ranking import BM25PlusRanker

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
HOTPOT_PATHS = (
    FIXTURES / "hotpot_dev_distractor_first100.json",
    ROOT / "harness" / "datasets" / "data" / "hotpotqa" / "hotpot_dev_distractor_first100.json",
)
FANOUTQA_MISS = "No page with that title exists. Try searching for one of these similar articles instead:\n"
PAPER_MISS = "No page with that title exists. Try one of the similar searches:\n"
EINSTEIN_Q = "Which university did Albert Einstein's first wife Mileva Marić study at, and when did they divorce?"


def count(text: str) -> int:
    return count_tiktoken(text)


@dataclass(frozen=True)
class FakePage:
    pageid: int
    revid: int
    title: str
    text: str
    timestamp: str | None = None


class FakeSnapshot:
    """resolve_title: exact, then case-insensitive, then one redirect; similar_titles: difflib."""

    def __init__(self, pages: list[FakePage], redirects: dict[str, str]):
        self.pages = {p.title: p for p in pages}
        self.folded = {p.title.casefold(): p for p in pages}
        self.redirects = redirects
        self.similar_calls = 0

    def resolve_title(self, title: str):
        title = " ".join(title.replace("_", " ").split())
        page = self.pages.get(title) or self.folded.get(title.casefold())
        if page is None and title in self.redirects:
            page = self.pages.get(self.redirects[title])
        return page

    def similar_titles(self, query: str, k: int = 10) -> list[str]:
        self.similar_calls += 1
        return difflib.get_close_matches(query, sorted(self.pages), n=k, cutoff=0.0)


@pytest.fixture(scope="module")
def articles() -> dict[str, str]:
    data = json.loads((FIXTURES / "wikipedia_en_science_physics_10.json").read_text(encoding="utf-8"))
    return {a["title"]: a["text"] for a in data}


@pytest.fixture(scope="module")
def snapshot(articles) -> FakeSnapshot:
    pages = [FakePage(i + 1, 1000 + i, title, text) for i, (title, text) in enumerate(articles.items())]
    hotpot = next((json.loads(p.read_text(encoding="utf-8")) for p in HOTPOT_PATHS if p.exists()), [])
    seen = set(articles)
    for q in hotpot[:10]:
        for title, sentences in zip(q["context"]["title"], q["context"]["sentences"]):
            if title not in seen:
                seen.add(title)
                pages.append(FakePage(len(pages) + 1, 5000 + len(pages), title, "".join(sentences)))
    return FakeSnapshot(pages, {"Einstein": "Albert Einstein", "Human anatomy": "Anatomy"})


def make_tool(snapshot, context_size: int = 8192, **config) -> SearchTool:
    return SearchTool(snapshot, SearchConfig(**config), count, context_size)


def fragments_of(text: str) -> list[str]:
    return [part.split("\n</fragment>\n")[0] for part in text.split("<fragment>\n")[1:]]


def expected_order(page_text: str, ranking_text: str) -> list[str]:
    chunks = chunk_text(page_text, 1024)
    return [chunks[i] for i in BM25PlusRanker(tokenize_fanoutqa(chunks)).rank(tokenize_fanoutqa([ranking_text])[0])]


# schema ----------------------------------------------------------------------------------------
def test_schema_and_registry(snapshot):
    tool = make_tool(snapshot)
    schema = {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search Wikipedia for an article with the given title, and get its content. "
            "If no such article is found, return similar article names.",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
        },
    }
    assert tool.openai_schema() == schema == tool_schema("search")
    assert TOOLS.get("search") is SearchTool
    assert tool.describe()["budget_tokens"] == 4096 and tool.describe()["style"] == "fanoutqa"


# misses ----------------------------------------------------------------------------------------
def test_not_found_lists_similar_titles(snapshot):
    tool = make_tool(snapshot)
    result = tool("Albert Einstien", EINSTEIN_Q)
    similar = snapshot.similar_titles("Albert Einstien", 10)
    assert "Albert Einstein" in similar and len(similar) == 10
    assert result.text == FANOUTQA_MISS + "\n".join(f"- {t}" for t in similar)
    assert (result.found_title, result.similar_titles, result.fragments) == (None, similar, 0)
    assert not result.whole_page and not result.truncated
    assert result.tokens == count(result.text)


def test_not_found_paper_style_and_max_similar(snapshot):
    tool = make_tool(snapshot, style="paper-2024", max_similar=3)
    result = tool("Anatomi", "What is anatomy?")
    similar = snapshot.similar_titles("Anatomi", 3)
    assert result.text == PAPER_MISS + "\n".join(f"<search>{t}</search>" for t in similar)
    assert result.similar_titles == similar and len(similar) == 3


# hits ------------------------------------------------------------------------------------------
def test_small_page_returned_whole(snapshot, articles):
    result = make_tool(snapshot)("Alien", "What does alien mean in law?")
    assert result.text == f"<document>\n<title>Alien</title>\n<content>\n{articles['Alien']}\n</content>\n</document>"
    assert result.whole_page and not result.truncated and result.fragments == 0
    assert result.found_title == "Alien" and result.tokens == count(result.text) <= 4096


@pytest.mark.parametrize(
    "query,title", [("  alien \n", "Alien"), ("ALBERT_EINSTEIN", "Albert Einstein"), ("Einstein", "Albert Einstein")]
)
def test_titles_resolve_case_whitespace_redirects(snapshot, query, title):
    assert make_tool(snapshot, context_size=100_000)(query, "q").found_title == title


@pytest.mark.slow
def test_long_page_equals_reference_code(snapshot, articles, monkeypatch):
    """The FanOutQA authors' search function (paper code, reference/paper_benchmarks/run_openbook.py;
    ReDel's tool packs the same way), restated: a page too long for the budget (half the context) is
    returned as its fragments in fanoutqa's own Corpus.best order (official spaCy normalize,
    rank_bm25), as many as keep the whole reply within the budget, stopping at the first that does
    not; same page, question, counter and budget."""
    import itertools

    fretrieval = pytest.importorskip("fanoutqa.retrieval")
    import fanoutqa.norm
    import spacy
    from fanoutqa.models import Evidence

    from harness.scoring.normalize import MODEL

    if fanoutqa.norm.nlp.pipe is None:
        fanoutqa.norm.nlp.pipe = spacy.load(MODEL)
    title, question, context = "Anatomy", "Which Greek physicians dissected human bodies in Alexandria?", 4096
    page_text = articles[title]
    monkeypatch.setattr(fretrieval, "wiki_content", lambda doc: page_text)
    max_search_tokens = context // 2

    head, tail = f"<document>\n<title>{title}</title>\n", "</document>"
    assert count(f"{head}<content>\n{page_text}\n</content>\n{tail}") > max_search_tokens  # not whole: fragments
    corpus = fretrieval.Corpus([Evidence(pageid=1, revid=1, title=title, url="")], doc_len=1024)
    ranked = [f"<fragment>\n{doc.content}\n</fragment>\n" for doc in corpus.best(question)]
    bodies = itertools.accumulate(ranked, initial="")  # "", then the best 1, 2, ... fragments
    fitting = list(itertools.takewhile(lambda body: count(head + body + tail) <= max_search_tokens, bodies))
    expected, kept = head + fitting[-1] + tail, len(fitting) - 1

    result = make_tool(snapshot, context_size=context)(title, question)
    assert result.text == expected
    assert result.fragments == kept > 0 and result.truncated and not result.whole_page
    assert result.tokens == count(result.text) <= max_search_tokens


@pytest.mark.parametrize("context", [1024, 3000, 8192, 16_000])
@pytest.mark.slow
def test_fragments_fill_budget_exactly(snapshot, articles, context):
    tool = make_tool(snapshot, context_size=context)
    result = tool("Albert Einstein", EINSTEIN_Q)
    budget = int(context * 0.5)
    assert tool.budget == budget
    head, tail = "<document>\n<title>Albert Einstein</title>\n", "</document>"
    assert result.text.startswith(head) and result.text.endswith(tail) and "<content>" not in result.text
    assert result.tokens == count(result.text) <= budget
    ranked = expected_order(articles["Albert Einstein"], EINSTEIN_Q)
    got = fragments_of(result.text)
    assert got == ranked[: len(got)] and result.fragments == len(got)
    assert result.truncated == (len(got) < len(ranked))
    # the next fragment in rank order would have passed the budget
    body = "".join(f"<fragment>\n{c}\n</fragment>\n" for c in ranked[: len(got) + 1])
    assert count(head + body + tail) > budget


def test_ranking_query_question_vs_query(snapshot, articles):
    by_question = make_tool(snapshot, context_size=6000)("Albert Einstein", EINSTEIN_Q)
    by_query = make_tool(snapshot, context_size=6000, ranking_query="query")("Albert Einstein", EINSTEIN_Q)
    q_frags, s_frags = fragments_of(by_question.text), fragments_of(by_query.text)
    assert q_frags != s_frags
    assert q_frags == expected_order(articles["Albert Einstein"], EINSTEIN_Q)[: len(q_frags)]
    assert s_frags == expected_order(articles["Albert Einstein"], "Albert Einstein")[: len(s_frags)]
    assert any("Marić" in f for f in q_frags[:3])


def test_paper_style_always_returns_fragments(snapshot, articles):
    result = make_tool(snapshot, context_size=100_000, style="paper-2024")("Alien", "What does alien mean in law?")
    chunks = chunk_text(articles["Alien"], 1024)
    assert not result.whole_page and not result.truncated and result.fragments == len(chunks) > 1
    assert result.text.startswith("<document>\n<title>Alien</title>\n<fragment>\n") and "<content>" not in result.text
    assert fragments_of(result.text) == expected_order(articles["Alien"], "What does alien mean in law?")


def test_nothing_fits(snapshot):
    result = make_tool(snapshot, context_size=40)("Albert Einstein", EINSTEIN_Q)
    assert result.text == "<document>\n<title>Albert Einstein</title>\n</document>"
    assert result.fragments == 0 and result.truncated and result.tokens == count(result.text)


def test_budget_fraction(snapshot):
    half = make_tool(snapshot, context_size=8000)("Anatomy", "What is gross anatomy?")
    quarter = make_tool(snapshot, context_size=8000, budget_fraction=0.25)("Anatomy", "What is gross anatomy?")
    assert quarter.tokens <= 2000 < half.tokens <= 4000 and quarter.fragments < half.fragments
    assert fragments_of(quarter.text) == fragments_of(half.text)[: quarter.fragments]


def test_index_built_once_per_page(snapshot, monkeypatch):
    import harness.tools.search as search_mod

    calls = []
    real = search_mod.tokenize_fanoutqa
    monkeypatch.setattr(search_mod, "tokenize_fanoutqa", lambda texts: calls.append(1) or real(texts))
    tool = make_tool(snapshot, context_size=4000)
    first = tool("Albert Einstein", EINSTEIN_Q)
    second = tool("albert einstein", "When did Einstein receive the Nobel Prize in Physics?")
    third = tool("Albert Einstein", EINSTEIN_Q)
    assert len(calls) == 4  # chunks once, then one query tokenization per call
    assert first.text == third.text != second.text


@pytest.mark.parametrize(
    "query",
    [
        "",
        "   ",
        "{}",
        "{0}",
        "%s %d",
        "\x00",
        "😀🔭",
        "a" * 5000,
        "Alien#Etymology",
        "[[Alien]]",
        "<search>Alien</search>",
        "Robert'); DROP TABLE pages;--",
        "\\",
        "\n\n\n",
        "Ω≈ç√∫",
        "?*[]^$",
    ],
)
def test_odd_queries_do_not_crash(snapshot, query):
    result = make_tool(snapshot)(query, "What is an alien?")
    assert isinstance(result, SearchResult) and isinstance(result.text, str)
    assert result.tokens == count(result.text)
    if not query.strip():
        assert result.text == FANOUTQA_MISS and result.similar_titles == []


def test_config_validation(snapshot):
    bad_configs = (
        {"style": "nope"},
        {"ranking_query": "title"},
        {"chunk_size": 0},
        {"budget_fraction": 0},
        {"max_similar": -1},
        {"bm25_k1": 0},
    )
    for bad in bad_configs:
        with pytest.raises(ValueError):
            SearchConfig(**bad)
    with pytest.raises(ValueError):
        SearchTool(snapshot, SearchConfig(), count, None)


def test_rank_chunks_is_corpus_order(articles):
    chunks = [(t, c) for t in ("Alien", "Astronomer") for c in chunk_text(articles[t], 1024)]
    question = "Who observes planets and stars?"
    order = rank_chunks(chunks, question, SearchConfig())
    assert sorted(order) == list(range(len(chunks)))
    ranker = BM25PlusRanker(tokenize_fanoutqa(c for _, c in chunks))
    assert order == ranker.rank(tokenize_fanoutqa([question])[0])
    assert rank_chunks([], question) == []


# a real snapshot file ----------------------------------------------------------------------------
def test_with_real_snapshot(tmp_path, articles):
    from harness.wiki_snapshot import Page, Snapshot, SnapshotWriter

    path = tmp_path / "physics.sqlite"
    with SnapshotWriter(path, source="tests/fixtures/wikipedia_en_science_physics_10.json", options={}) as writer:
        for i, (title, text) in enumerate(articles.items()):
            writer.add_page(Page(pageid=i + 1, revid=100 + i, title=title, text=text, timestamp="2023-11-20T00:00:00Z"))
        writer.add_redirect("Einstein", "Albert Einstein")
        writer.finish()
    snap = Snapshot.open(path)
    try:
        # the title rule (resolve_title: case, redirects); the default over a full-text snapshot is
        # FanOutQA's search-results rule (tests/test_search_hit_rule.py), under which "Einstein" is a miss
        tool = SearchTool(snap, SearchConfig(hit_rule="title"), count, 8192)
        assert SearchTool(snap, SearchConfig(), count, 8192)("Einstein", EINSTEIN_Q).found_title is None
        hit = tool("Einstein", EINSTEIN_Q)
        assert hit.found_title == "Albert Einstein" and hit.fragments > 0 and hit.truncated
        assert fragments_of(hit.text) == expected_order(articles["Albert Einstein"], EINSTEIN_Q)[: hit.fragments]
        small = tool("agricultural science", "q")
        assert small.whole_page and articles["Agricultural science"] in small.text
        miss = tool("Albert Einstien", EINSTEIN_Q)
        assert miss.found_title is None and "Albert Einstein" in miss.similar_titles
        assert miss.text == FANOUTQA_MISS + "\n".join(f"- {t}" for t in miss.similar_titles)
        for odd in ("", "{}", "\x00", "😀", "a" * 3000, '"AND" OR NEAR(', "*"):
            assert isinstance(tool(odd, "q").text, str)
    finally:
        snap.close()
