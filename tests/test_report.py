"""harness report: one self-contained HTML page, checked as text and in headless Chromium (Debian's
chromium + chromedriver driven by selenium): it loads without errors, shows the expected rows,
escapes hostile model output, and sorts when a header is clicked.

The browser part skips when chromium is absent, and fails instead with HARNESS_REQUIRE_BROWSER=1
(set by .ci/run, which installs it)."""

from __future__ import annotations

import json
import os
import re
import shutil

import pytest
from conftest import run_harness
from fake_openai import FakeServer, scripted_search_model

# model output that would run script or inject markup if it were not escaped
HOSTILE = '</script><script>document.title="pwned"</script><img src=x onerror="window.__xss=1"> & "q" <!--'
SCRIPT = {
    "Scott Derrickson": ("Scott Derrickson", "yes " + HOSTILE),
    "Corliss Archer": ("Shirley Temple", "Chief of Protocol"),
}
IDS = ["hotpot-dev-000", "hotpot-dev-001", "hotpot-dev-002"]


@pytest.fixture(scope="module")
def open_book_run(tmp_path_factory, hotpot_snapshot):
    """An open-book HotpotQA run (3 questions) whose model searches, then answers: tool calls,
    real search results from the snapshot, one hostile answer."""
    base = tmp_path_factory.mktemp("report")
    snapshot = hotpot_snapshot
    out = base / "run"
    with FakeServer(scripted_search_model(SCRIPT)) as server:
        proc = run_harness(
            "run",
            "--model",
            "openai/scripted",
            "--base-url",
            server.url + "/v1",
            "--dataset",
            "hotpotqa:dev",
            "--snapshot",
            str(snapshot),
            "--search-space",
            "evidence-only",
            "--setting",
            "open-book",
            "--context-size",
            "4096",
            "--limit",
            "3",
            "--max-tokens",
            "16",
            "--out",
            str(out),
            env={"HARNESS_CACHE_DIR": str(base / "cache")},
        )
    assert proc.returncode == 0, proc.stderr
    proc = run_harness("report", str(out))
    assert proc.returncode == 0, proc.stderr
    assert (out / "report.html").is_file()
    return out


def embedded_data(html: str) -> dict:
    match = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', html, re.DOTALL)
    return json.loads(match.group(1))


@pytest.mark.slow
def test_report_html_is_escaped_and_self_contained(open_book_run):
    html = (open_book_run / "report.html").read_text()
    assert html.startswith("<!DOCTYPE html>")
    # exactly the two script elements of the page: the data and the sorter
    assert len(re.findall(r"<script\b", html)) == 2 and html.count("</script>") == 2
    assert "&lt;/script&gt;&lt;script&gt;document.title=&quot;pwned&quot;" in html
    assert 'onerror="window' not in html
    assert not re.search(r"(?:src|href)=[\"']?(?:https?:)?//", html)  # nothing fetched from anywhere
    data = embedded_data(html)
    rows = {r["id"]: r for r in data["rows"]}
    assert list(rows) == IDS
    assert rows["hotpot-dev-000"]["answer"] == "yes " + HOSTILE  # the JSON round-trips exactly
    results = json.loads((open_book_run / "results.json").read_text())
    raw = {r["question_id"]: r for r in results["scores"]["raw"]}
    for qid in IDS:
        assert rows[qid]["scores"]["em-f1.em"] == raw[qid]["em-f1"]["em"]
        assert rows[qid]["scores"]["fanoutqa-string.acc"] == raw[qid]["fanoutqa-string"]["acc"]
    assert rows["hotpot-dev-001"]["scores"]["em-f1.em"] == 1.0 and rows["hotpot-dev-001"]["tokens"] == 2 * (120 + 7)


def test_report_refuses_a_folder_that_is_not_a_run(tmp_path):
    proc = run_harness("report", str(tmp_path))
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [f"error: {tmp_path}: not a run directory (no results.json)"]


# --------------------------------------------------------------------------- the browser
BROWSER_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture
def browser(tmp_path):
    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    missing = [name for name, path in (("chromium", chromium), ("chromedriver", driver_path)) if not path]
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.options import Options
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        missing.append("selenium (pip install -e '.[test]')")
    if missing:
        reason = f"the browser test needs {', '.join(missing)} (Debian: apt-get install chromium chromium-driver)"
        if os.environ.get("HARNESS_REQUIRE_BROWSER") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    options = Options()
    options.binary_location = chromium
    for flag in BROWSER_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path / 'profile'}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def row_ids(driver):
    return driver.execute_script(
        "return Array.from(document.querySelectorAll('#question-table tbody tr')).map(r => r.dataset.id)"
    )


@pytest.mark.slow
def test_report_in_headless_chromium(open_book_run, browser):
    from selenium.webdriver.common.by import By

    browser.get((open_book_run / "report.html").resolve().as_uri())
    assert browser.execute_script("return document.readyState") == "complete"
    errors = [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]
    assert errors == []
    # the hostile answer stayed text: no script ran, no element was injected
    assert "pwned" not in browser.title and browser.execute_script("return window.__xss === undefined")
    assert browser.execute_script("return document.querySelectorAll('img').length") == 0
    assert browser.execute_script("return performance.getEntriesByType('resource').length") == 0

    assert row_ids(browser) == IDS
    # the run's scores figure, inline SVG (HotpotQA's headline: EM and F1 panels)
    titles = browser.execute_script("return Array.from(document.querySelectorAll('#figures svg text')).map(t => t.textContent)")
    assert {"EM", "F1", "openai/scripted"} <= set(titles)
    assert browser.execute_script("return document.querySelector('#figures svg').namespaceURI") == "http://www.w3.org/2000/svg"
    assert len(browser.find_elements(By.CSS_SELECTOR, "details.transcript")) == 3
    answer_cell = browser.find_elements(By.CSS_SELECTOR, "#question-table tbody tr")[0].find_elements(
        By.TAG_NAME, "td"
    )[5]
    assert answer_cell.text == "yes " + HOSTILE
    # the transcript shows the tool call, and the title the search returned
    browser.find_element(By.CSS_SELECTOR, "#t-1 > summary").click()
    call = browser.find_element(By.CSS_SELECTOR, "#t-1 .call")
    assert "search" in call.text and '"query": "Scott Derrickson"' in call.text
    assert "Scott Derrickson" in browser.find_element(By.CSS_SELECTOR, "#t-1 ol.searches").text
    assert "Kiss and Tell" not in browser.find_element(By.CSS_SELECTOR, "#t-2 ol.searches").get_attribute("textContent")
    assert "Shirley Temple" in browser.find_element(By.CSS_SELECTOR, "#t-2 ol.searches").get_attribute("textContent")
    # the gold items each answer matched (the string metric's rule): the part of the answer quoted as text
    matched = browser.find_elements(By.CSS_SELECTOR, '#t-1 .gold-match[data-metric="fanoutqa-string"] li.matched')
    assert [li.find_element(By.CSS_SELECTOR, "span.gold").text for li in matched] == ["yes"]
    assert matched[0].find_element(By.CSS_SELECTOR, "q.matched-text").text == "yes " + HOSTILE
    assert matched[0].value_of_css_property("color") == "rgba(23, 105, 47, 1)"  # green
    browser.find_element(By.CSS_SELECTOR, "#t-3 > summary").click()
    missed = browser.find_element(By.CSS_SELECTOR, '#t-3 .gold-match[data-metric="fanoutqa-string"]')
    assert missed.find_element(By.CSS_SELECTOR, "li.missed span.gold").text == "Animorphs"
    assert "0 of 1 gold items matched" in missed.text and not missed.find_elements(By.CSS_SELECTOR, "li.matched")

    # sorting: answers ascending, then descending; numbers sort as numbers
    header = browser.find_element(By.CSS_SELECTOR, '#question-table th[data-key="answer"]')
    header.click()
    assert row_ids(browser) == ["hotpot-dev-001", "hotpot-dev-002", "hotpot-dev-000"]  # Chief, I do not, yes
    assert header.get_attribute("aria-sort") == "ascending"
    header.click()
    assert row_ids(browser) == ["hotpot-dev-000", "hotpot-dev-002", "hotpot-dev-001"]
    browser.find_element(By.CSS_SELECTOR, '#question-table th[data-key="score:em-f1.em"]').click()
    ems = browser.execute_script(
        "const d = JSON.parse(document.getElementById('report-data').textContent);"
        "const em = Object.fromEntries(d.rows.map(r => [r.id, r.scores['em-f1.em']]));"
        "return Array.from(document.querySelectorAll('#question-table tbody tr')).map(r => em[r.dataset.id])"
    )
    assert ems == sorted(ems) and ems[-1] == 1.0
    assert [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "ERROR")] == []


@pytest.mark.slow
def test_report_of_a_run_stopped_on_budget(tmp_path):
    """Finished, failed and never-started samples all get a row; the failed one says why."""
    prices = tmp_path / "prices.yaml"
    prices.write_text("models:\n  openai/scripted: {input: 1.0, output: 10000.0}\n")
    out = tmp_path / "run"
    with FakeServer(scripted_search_model({}, usage=(150, 5))) as server:
        proc = run_harness(
            "run",
            "--model",
            "openai/scripted",
            "--base-url",
            server.url + "/v1",
            "--limit",
            "4",
            "--max-connections",
            "1",
            "--max-tokens",
            "16",
            "--price-table",
            str(prices),
            "--max-cost",
            "0.22",  # worst case 0.16 a request, 0.05015 spent each: two are sent, the third refused
            "--out",
            str(out),
        )
    assert proc.returncode == 1 and "stopped on budget" in proc.stderr
    assert run_harness("report", str(out), "--out", str(tmp_path / "r.html")).returncode == 0
    html = (tmp_path / "r.html").read_text()
    rows = embedded_data(html)["rows"]
    assert [r["status"] for r in rows] == ["ok", "ok", "failed: budget_exhausted", "pending"]
    assert rows[3]["question"]  # a question never started still shows, from the dataset
    assert rows[0]["cost_usd"] == pytest.approx((150 * 1.0 + 5 * 10000.0) / 1e6)
    assert "request not sent" in rows[2]["error"]
    assert html.count('<tr class="failed"') == 1 and html.count('<tr class="pending"') == 1


def test_step_records_of_an_unexpected_shape_are_drawn_safely():
    """Records from files a strategy did not write as declared: a parent loop, a node without its
    parent, a trace of another shape; every node drawn once, nothing raw."""
    from html_tree import parse

    from harness.analysis.report import _steps_html

    kinds = {"trace", "delegation"}
    loop = {"nodes": [{"id": "a", "parent": "b", "instructions": HOSTILE}, {"id": "b", "parent": "a"},
                      {"id": "c", "parent": "gone", "messages": "not a list"}, "not a node"]}  # fmt: skip
    page = parse(_steps_html({"delegation": loop}, kinds))
    assert sorted(li.attrs["data-node"] for li in page.find_all("li", "node")) == ["a", "b", "c"]
    assert page.find("li", "node", data_node="a").find("pre").text() == HOSTILE and not page.find_all("img")
    for other in ([{"kind": HOSTILE}], HOSTILE, {"nodes": HOSTILE}):
        key = "delegation" if isinstance(other, dict) else "trace"
        page = parse(_steps_html({key: other}, kinds))
        assert page.find("pre").text() == json.dumps(other, indent=2, ensure_ascii=False)
        assert not page.find_all("img") and not page.find_all("table")
    # a kind the run's strategy did not declare is not drawn (the report shows it as JSON)
    assert _steps_html({"trace": [{"step": 1, "thought": "x"}]}, {"searches"}) == ""
