"""Several servers behind one run (--base-url URL1,URL2: least outstanding, a failing server taken
out and checked back in, its requests sent elsewhere) and adaptive concurrency on 429, against
the loopback fault server; the balancing and the limit also alone, on a fake clock."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from fault_server import FaultServer, run_args

from harness.cli import main
from harness.execution.config import build_config
from harness.errors import ConfigError, TransientModelError
from harness.models.concurrency import AdaptiveLimit
from harness.models.pool import ServerPool


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def run(urls: str, out: Path, *extra: str, limit: str = "4") -> int:
    return main(run_args(urls, out, "--retry-max-wait", "0.05", "--request-timeout", "2", *extra, limit=limit))


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


# --------------------------------------------------------------------------- adaptive limit
def test_limit_halves_once_per_wave_and_climbs_back_one_window_at_a_time():
    clock = Clock()
    limit = AdaptiveLimit(8, clock=clock)
    sent_before = clock()
    clock.t += 1
    limit.throttled(sent_before)
    assert limit.limit == 4
    for _ in range(3):  # the rest of that wave was sent at the old limit: already answered
        limit.throttled(sent_before)
    assert limit.limit == 4 and limit.reductions == 1 and limit.throttled_requests == 4
    clock.t += 1
    limit.throttled(clock())  # sent after the cut: throttled again
    limit.throttled(clock() + 1)
    assert limit.limit == 1  # 4 -> 2 -> 1
    limit.throttled(clock() + 2)
    assert limit.limit == 1 and limit.min_reached == 1  # never below one
    for expected in (2, 3, 4):
        for _ in range(expected - 2):  # all but one answer of a window at the current limit
            limit.succeeded()
        assert limit.limit == expected - 1
        limit.succeeded()
        assert limit.limit == expected
    facts = limit.facts()
    assert facts["reductions"] == 3 and facts["increases"] == 3 and facts["min_in_flight"] == 1
    assert [(c["from"], c["to"]) for c in facts["changes"]] == [(8, 4), (4, 2), (2, 1), (1, 2), (2, 3), (3, 4)]


def test_limit_gates_requests_in_flight():
    limit = AdaptiveLimit(3)
    limit.limit = 2
    peak = 0

    async def one():
        nonlocal peak
        async with limit.slot():
            peak = max(peak, limit.in_flight)
            await asyncio.sleep(0.01)

    async def go():
        await asyncio.gather(*(one() for _ in range(10)))

    asyncio.run(go())
    assert peak == 2 and limit.in_flight == 0


# --------------------------------------------------------------------------- pool alone
def test_pool_picks_the_least_outstanding_and_takes_out_then_back():
    clock = Clock()
    healthy = {"a": True, "b": True}

    async def health(ep):
        return healthy[ep.url]

    pool = ServerPool(["a", "b"], health, first_cooldown=1.0, clock=clock)

    async def go():
        a = await pool.acquire()
        b = await pool.acquire()
        assert (a.url, b.url) == ("a", "b")  # a is busy, so b
        pool.release(b)
        assert (await pool.acquire()).url == "b"  # b is free again, a still busy
        pool.release(a, failed=True, server_fault=True, error="connection refused")
        assert not a.in_service and a.taken_out == 1
        # a is out: everything goes to b, however busy
        assert [(await pool.acquire()).url for _ in range(3)] == ["b"] * 3
        healthy["a"] = False
        clock.t += 1.5  # cool-down over, but the check fails: out for twice as long
        assert (await pool.acquire()).url == "b"
        assert a.health_checks_failed == 1 and not a.in_service
        healthy["a"] = True
        clock.t += 1.0  # not yet (2 s now)
        assert (await pool.acquire()).url == "b" and not a.in_service
        clock.t += 1.5
        assert (await pool.acquire()).url == "a"  # checked, back, and the least busy
        assert a.taken_back == 1
        # every server tried for this request: the retry loop waits, it is not lost
        with pytest.raises(TransientModelError, match="no server in service"):
            await pool.acquire(exclude={a, b})

    asyncio.run(go())
    facts = {f["url"]: f for f in pool.facts()}
    assert facts["a"]["failures"] == 1 and facts["a"]["taken_out"] == 1 and facts["a"]["taken_back"] == 1
    assert facts["b"]["failures"] == 0 and facts["b"]["requests"] == 7


def test_pool_with_every_server_out_checks_the_one_due_first():
    clock = Clock()

    async def health(ep):
        return True

    pool = ServerPool(["a", "b"], health, clock=clock)

    async def go():
        for ep in pool.endpoints:
            pool.take_out(ep, "down")
        return await pool.acquire()  # no waiting out the cool-down when nothing else is left

    assert asyncio.run(go()).url == "a"


# --------------------------------------------------------------------------- whole runs
@pytest.mark.parametrize("fault", ["drop", "503"])
@pytest.mark.slow
def test_a_failing_server_is_taken_out_and_every_sample_finishes_once(tmp_path, fault):
    with FaultServer(default=fault) as bad, FaultServer(default="slow", hang_s=0.2) as good:
        code = run(f"{bad.url},{good.url}", tmp_path / "run", "--max-connections", "2", "--max-attempts", "2")
    assert code == 0
    samples = lines(tmp_path / "run" / "samples.jsonl")
    assert len(samples) == 4 and len({s["id"] for s in samples}) == 4
    assert all(s["answer"] == "Paris" for s in samples)
    assert not lines(tmp_path / "run" / "failures.jsonl")
    assert bad.served and set(bad.served) == {fault}
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    servers = {s["url"]: s for s in results["model"]["servers"]}
    assert servers[bad.url]["failures"] == len(bad.served) >= 1
    assert servers[bad.url]["taken_out"] >= 1 and not servers[bad.url]["in_service_at_end"]
    assert servers[good.url]["requests"] == len(good.served) == 4 and servers[good.url]["failures"] == 0
    # the request that failed on the bad server went to the good one within the same attempt
    assert all(s["model_calls"] == 1 for s in samples)
    # each sample says which server answered it
    assert all(s["servers"] == {good.url: 1} for s in samples)


@pytest.mark.slow
def test_requests_go_to_the_least_busy_server(tmp_path):
    with FaultServer(default="slow", hang_s=0.3) as a, FaultServer(default="slow", hang_s=0.3) as b:
        code = run(f"{a.url},{b.url}", tmp_path / "run", "--max-connections", "2")
    assert code == 0
    assert len(a.served) == len(b.served) == 2  # two in flight, one on each
    assert max(a.in_flight_seen + b.in_flight_seen) == 1
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert [s["requests"] for s in results["model"]["servers"]] == [2, 2]
    per_sample = [s["servers"] for s in lines(tmp_path / "run" / "samples.jsonl")]
    assert sorted(per_sample, key=str) == sorted([{a.url: 1}] * 2 + [{b.url: 1}] * 2, key=str)


def test_the_server_list_order_is_not_the_run():
    def key(urls: str) -> str:
        return build_config({"model": "openai/x", "base_url": urls}).config_hash()

    a, b = "http://127.0.0.1:1/v1", "http://127.0.0.1:2/v1"
    assert key(f"{a},{b}") == key(f"{b},{a}")
    assert key(f"{a},{b}") != key(a)  # another set of servers is another run


@pytest.mark.slow
def test_a_server_that_recovers_is_checked_and_taken_back(tmp_path):
    # a fails its first request, then answers; b is slow, so once a's 1 s cool-down is over and
    # its health check passes, requests go to it again
    with FaultServer(script=["500"]) as a, FaultServer(default="slow", hang_s=0.6) as b:
        code = run(f"{a.url},{b.url}", tmp_path / "run", "--max-connections", "2", limit="8")
    assert code == 0
    assert len({s["id"] for s in lines(tmp_path / "run" / "samples.jsonl")}) == 8
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    servers = {s["url"]: s for s in results["model"]["servers"]}
    assert servers[a.url]["taken_out"] == 1 and servers[a.url]["taken_back"] == 1
    assert a.served[0] == "500" and "ok" in a.served[1:]


def test_one_url_records_no_pool(tmp_path):
    with FaultServer() as server:
        assert run(server.url, tmp_path / "run", limit="1") == 0
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert "servers" not in results["model"] and results["model"]["base_url"] == server.url


@pytest.mark.slow
def test_429s_cut_the_requests_in_flight_then_they_climb_back(tmp_path):
    # four 429s at once (the first wave at --max-connections 4), then slow answers
    with FaultServer(script=["429"] * 4, default="slow", hang_s=0.3) as server:
        code = run(server.url, tmp_path / "run", "--max-connections", "4", limit="8")
    assert code == 0
    assert len(lines(tmp_path / "run" / "samples.jsonl")) == 8
    assert server.served[:4] == ["429"] * 4
    # the four retries went out two at a time (all four at once without the limit)
    assert max(server.in_flight_seen[4:8]) <= 2
    (invocation,) = json.loads((tmp_path / "run" / "results.json").read_text())["invocations"]
    concurrency = invocation["concurrency"]
    assert concurrency["throttled_requests"] == 4
    # Cut to 2 by the first wave. On a slow machine the 4th request may be sent after that cut and
    # meet the 4th 429 as a new wave (a second cut, 2 -> 1): legitimate, so both are accepted.
    changes = [(c["from"], c["to"]) for c in concurrency["changes"]]
    cuts = changes[: concurrency["reductions"]]
    assert cuts in ([(4, 2)], [(4, 2), (2, 1)]) and concurrency["min_in_flight"] == cuts[-1][1]
    # then back up one at a time to --max-connections
    climb = changes[len(cuts) :]
    assert climb == [(n, n + 1) for n in range(cuts[-1][1], 4)] and concurrency["final_in_flight"] == 4
    assert concurrency["increases"] == len(climb)


def test_no_429_no_change(tmp_path):
    with FaultServer() as server:
        assert run(server.url, tmp_path / "run", "--max-connections", "3", limit="3") == 0
    (invocation,) = json.loads((tmp_path / "run" / "results.json").read_text())["invocations"]
    assert invocation["concurrency"]["changes"] == [] and invocation["concurrency"]["min_in_flight"] == 3


# --------------------------------------------------------------------------- input
@pytest.mark.parametrize(
    "urls, shown",
    [
        ("http://127.0.0.1:9/v1,", "an empty entry"),
        ("http://127.0.0.1:9/v1,localhost:8000", "'localhost:8000'"),
        ("http://127.0.0.1:9/v1,http://127.0.0.1:9/v1/", "listed twice"),
        ("http://127.0.0.1:9/v1,http://h:port/v1", "'http://h:port/v1'"),
    ],
)
def test_a_bad_url_in_the_list_is_one_line_and_exit_2(tmp_path, capsys, urls, shown):
    code = main(run_args(urls, tmp_path / "run"))
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: --base-url") and shown in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()


def test_a_list_for_a_backend_without_one_is_refused(tmp_path, capsys):
    code = main(["run", "--model", "anthropic/claude-x", "--base-url", "http://127.0.0.1:9,http://127.0.0.1:10",
                 "--dataset", "hotpotqa:dev", "--limit", "1", "--out", str(tmp_path / "run")])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "list of servers" in err and "anthropic/" in err
    assert not (tmp_path / "run").exists()


def test_a_password_in_the_list_is_refused_and_never_shown(tmp_path, capsys):
    # a user:password would be sent as Basic auth in place of the API key: refused before any request
    with FaultServer() as a, FaultServer() as b:
        host_b = b.url.split("//", 1)[1]
        assert run(f"{a.url},http://bob:pw-two-secret@{host_b}", tmp_path / "run", limit="2") == 2
    with pytest.raises(ConfigError) as info:
        build_config({"base_url": f"http://carol:pw-three-secret@{host_b},ftp://x"})
    assert "pw-three-secret" not in str(info.value) and "user or password" in str(info.value)
    err = capsys.readouterr().err
    assert err.startswith("error: --base-url") and len(err.strip().splitlines()) == 1
    assert f"'{b.url}' carries a user or password" in err and "OPENAI_API_KEY" in err
    assert "pw-two-secret" not in err
    assert a.served == [] and b.served == [] and not (tmp_path / "run").exists()
