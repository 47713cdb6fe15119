"""``harness run ... --shards K --launcher ray[=ADDRESS]``: the K shards of one run as K Ray tasks, then merged.

Ray is the engine, not a scheduler of ours: each task runs ``harness run <the same options> --shard I/K
--out OUT/shards/shard-IofK`` as a child process on whichever node Ray gives it, in the launcher's
working directory, so OUT and every path the options name must be on storage every node sees. A task
whose worker or node dies is retried by Ray (``max_retries``, Ray's retry of system failures: the
task's own exit status is its result and never retried), and the retried shard resumes from its
directory as any rerun does: its finished samples are kept and not asked again. When all K are done
the shards are merged into OUT (``harness.execution.merge.merge_runs``, the ``harness merge`` path),
the shards kept under OUT/shards. Progress is one view over all shards, read from their directories.

Everything is checked before a task is submitted (the options as ``harness run`` checks them, OUT and
each shard directory, Ray importable and reachable). Ray is imported here only, inside functions:
``import harness`` and a run without ``--launcher`` never import it (tests/test_ray_launcher.py).

Ray facts used (ray 2.60.0): ``ray.init(address=...)`` connects to a running cluster, without one it
starts a local instance (https://docs.ray.io/en/latest/ray-core/api/doc/ray.init.html); a task is
retried on worker or node death up to ``max_retries`` times, application exceptions only with
``retry_exceptions`` (https://docs.ray.io/en/latest/ray-core/fault_tolerance/tasks.html);
``ray.wait(refs, timeout=...)`` returns the finished ones; ``ray.cancel`` interrupts a running task
with KeyboardInterrupt; ``ray.get_runtime_context().get_node_id()`` names a task's node.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import ConfigError, HarnessError
from harness.execution.config import RunConfig
from harness.execution.record import RunResults
from harness.records import CONFIG_FILE, FAILURES_FILE, SAMPLES_FILE, record_epoch, work_key
from harness._version import pip_install

SHARDS_FOLDER = "shards"  # OUT/shards/shard-IofK: the shards, kept beside the merged run
# a task is retried this many times when its worker or node dies (Ray's own default for tasks:
# ray._private.ray_constants.DEFAULT_TASK_MAX_RETRIES, ray 2.60.0)
MAX_RETRIES = 3
# the launcher sends Ray a few short strings per task: a small object store for a local instance
LOCAL_OBJECT_STORE_BYTES = 100 * 1024 * 1024
ATTEMPT_MARK = "=== harness ray launcher: attempt on node "  # a shard's log: one such line per attempt
LOCK_WAIT_S = 60.0  # a retried shard waits this long for its dead attempt's process to let go of the directory
POLL_S = 1.0
# exit statuses of a shard after which its rows are merged (1: some samples failed, 4: none answered)
MERGEABLE = (0, 1, 4)


def parse_launcher(text: str) -> str:
    """``--launcher``'s value: ``ray``, or ``ray=ADDRESS`` (a running cluster)."""
    name, eq, address = text.partition("=")
    if name != "ray":
        raise argparse.ArgumentTypeError(f"{text!r}: the launcher is ray (or ray=ADDRESS for a running cluster)")
    if eq and not address.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: ray=ADDRESS needs the cluster's address (or 'ray' alone)")
    return text


def split_launcher(text: str) -> tuple[str, str | None]:
    name, eq, address = text.partition("=")
    return name, (address.strip() if eq else None)


def shard_name(i: int, k: int) -> str:
    return f"shard-{i}of{k}"


# the Ray task ------------------------------------------------------------------------------------


def run_shard(argv: list[str], cwd: str, shards_dir: str, shard_dir: str, log_path: str) -> dict[str, Any]:
    """One shard, in a Ray task: ``harness ARGV`` as a child process in ``cwd``, its output appended to
    ``log_path``; returns its exit status, the node, and its last line when it failed."""
    import ray

    node = ray.get_runtime_context().get_node_id()
    if not os.path.isdir(cwd) or not os.path.isdir(os.path.join(cwd, shards_dir)):
        return {
            "rc": 2, "node": node,
            "error": f"{os.path.join(cwd, shards_dir)} is not on node {node[:12]} ({socket.gethostname()}): the "
            "launcher's working directory and --out must be on storage every node sees",
        }  # fmt: skip
    from harness.execution.lock import writer_of

    shard = os.path.join(cwd, shard_dir)
    deadline = time.monotonic() + LOCK_WAIT_S
    while writer_of(shard) and time.monotonic() < deadline:  # a dead attempt's process still exiting
        time.sleep(0.5)
    with open(os.path.join(cwd, log_path), "ab") as log:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        log.write(f"{ATTEMPT_MARK}{node} ({socket.gethostname()}, pid {os.getpid()}) at {stamp} ===\n".encode())
        log.flush()
        # the shard dies with this worker (a node that dies takes it along): harness.lifeline
        command = [sys.executable, "-m", "harness.commands.ray_shard", str(os.getpid()), *argv]
        proc = subprocess.Popen(command, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        # Ray's cancel is _thread.interrupt_main(), which does nothing where SIGINT is ignored (a cluster started
        # under nohup or from a background job inherits that): Python's own handler while the shard runs
        previous = signal.signal(signal.SIGINT, signal.default_int_handler) if _main_thread() else None
        try:
            rc = None
            while rc is None:  # in steps: Ray's cancel (a KeyboardInterrupt in this thread) lands between them
                try:
                    rc = proc.wait(timeout=0.5)
                except subprocess.TimeoutExpired:
                    continue
        except BaseException:  # cancelled (the launcher interrupted): the shard stops as on Ctrl-C, its rows kept
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            raise
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)
    result: dict[str, Any] = {"rc": rc, "node": node}
    if rc not in MERGEABLE:
        result["error"] = _last_line(Path(cwd) / log_path)
    return result


def _last_line(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, 2) - 8192))
            lines = [line.strip() for line in f.read().decode("utf-8", "replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1] if lines else ""


# the launcher ------------------------------------------------------------------------------------


@dataclass
class _Tail:
    """New complete lines of a file that grows (a shard's rows, its log), read where the last look stopped."""

    path: Path
    offset: int = 0
    partial: bytes = b""

    def new_lines(self) -> tuple[list[bytes], bool]:
        """(new lines, whether the file was rewritten shorter and the lines are all of it again)."""
        try:
            size = self.path.stat().st_size
        except OSError:
            return [], False
        restarted = size < self.offset  # a torn last line cut off by the shard's resume
        if restarted:
            self.offset, self.partial = 0, b""
        if size == self.offset:
            return [], restarted
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = self.partial + f.read(size - self.offset)
        self.offset = size
        *lines, self.partial = data.split(b"\n")
        return lines, restarted


@dataclass
class ShardView:
    index: int
    k: int
    path: Path
    log: Path
    total: int  # its selected pairs (questions x epochs)
    done: set[str] = field(default_factory=set)
    failed: set[str] = field(default_factory=set)
    nodes: list[str] = field(default_factory=list)  # the node of each attempt, from its log
    result: dict[str, Any] | None = None
    error: str | None = None  # Ray gave up on it (its tries used up), or it exited not to be merged

    def __post_init__(self):
        self._rows = _Tail(self.path / SAMPLES_FILE)
        self._failures = _Tail(self.path / FAILURES_FILE)
        self._log = _Tail(self.log)
        if self.log.exists():  # attempts of earlier launches are not this launch's
            self._log.offset = self.log.stat().st_size

    @property
    def spec(self) -> str:
        return f"{self.index}/{self.k}"

    def look(self) -> list[str]:
        """Reads what the shard wrote since the last look; returns the events to say (a new attempt)."""
        for tail, into, ok_only in ((self._rows, self.done, True), (self._failures, self.failed, False)):
            lines, restarted = tail.new_lines()
            if restarted:
                into.clear()
            for line in lines:
                try:
                    row = json.loads(line)
                    if isinstance(row.get("id"), str) and (not ok_only or row.get("status") == "ok"):
                        into.add(work_key(row["id"], record_epoch(row)))
                except Exception:  # noqa: BLE001 - a line being written: counted once whole
                    continue
        events = []
        for line in self._log.new_lines()[0]:
            text = line.decode("utf-8", "replace")
            if text.startswith(ATTEMPT_MARK):
                self.nodes.append(text[len(ATTEMPT_MARK):].split(" ", 1)[0])
                if len(self.nodes) > 1:
                    events.append(
                        f"shard {self.spec}: attempt {len(self.nodes)} on node {self.nodes[-1][:12]} (the worker "
                        f"or node of attempt {len(self.nodes) - 1} died); it resumes from {self.path}, "
                        f"{len(self.done)} of {self.total} samples kept"
                    )
        return events

    def state(self) -> str:
        n = f"{len(self.done)}/{self.total}"
        if self.error is not None:
            return f"{self.spec} {n} failed"
        if self.result is not None:
            return f"{self.spec} {n} done"
        if not self.nodes:
            return f"{self.spec} {n} waiting"
        return f"{self.spec} {n}" + (f" (attempt {len(self.nodes)})" if len(self.nodes) > 1 else "")


class AllShardsProgress:
    """One progress view over the shards: a line every ``EVERY_S`` seconds or ``EVERY_SHARE`` of the
    samples (as a single run's), an event line when a shard is retried, ends or fails, and a last line."""

    def __init__(self, views: list[ShardView], stream=None):
        from harness.execution.progress import Progress

        self.views = views
        self.stream = stream if stream is not None else sys.stderr
        self.every_s, share = Progress.EVERY_S, Progress.EVERY_SHARE
        self.total = sum(v.total for v in views)
        self.every_n = max(1, int(self.total * share + 0.999999))
        self.started = time.monotonic()
        for view in views:
            view.look()
        self.at_start = self.done()
        self._last_line, self._done_at_line = self.started, self.at_start

    def done(self) -> int:
        return sum(len(v.done) for v in self.views)

    def failed(self) -> int:
        return sum(len(v.failed - v.done) for v in self.views)

    def say(self, text: str) -> None:
        print(text, file=self.stream, flush=True)

    def look(self) -> None:
        for view in self.views:
            for event in view.look():
                self.say(event)
        done, now = self.done(), time.monotonic()
        if done - self._done_at_line >= self.every_n or now - self._last_line >= self.every_s:
            self.line()

    def line(self) -> None:
        from harness.execution.progress import _duration

        done, elapsed = self.done(), max(time.monotonic() - self.started, 1e-9)
        now_done = done - self.at_start
        parts = [f"progress: {done}/{self.total} samples done"]
        if self.at_start:
            parts[0] += f" ({self.at_start} before this launch)"
        parts.append(f"{self.failed()} failed")
        rate = now_done / elapsed
        if done >= self.total:
            parts.append(f"took {_duration(elapsed)}")
        elif rate > 0:
            parts.append(f"ETA {_duration((self.total - done) / rate)}")
        shards = ", ".join(v.state() for v in self.views)
        self.say(f"{', '.join(parts)}; shards {shards}")
        self._last_line, self._done_at_line = time.monotonic(), done


def _check_out(out: Path, k: int, config_hash: str) -> list[Path]:
    """OUT holds nothing but this run's shards (of this K) and an earlier merge of them, nobody writes
    them now, and the merge holds no sample the shards lack; returns the shard directories."""
    from harness.execution.lock import LOCK_FILE, writer_of
    from harness.execution.merge import MERGED_FILES
    from harness.records import iter_jsonl, read_json

    names = [shard_name(i, k) for i in range(1, k + 1)]
    shards_dir = out / SHARDS_FOLDER
    if out.exists():
        other = sorted(p.name for p in out.iterdir() if p.name not in {SHARDS_FOLDER, LOCK_FILE, *MERGED_FILES})
        if other:
            raise ConfigError(
                f"--out {out}: holds {other[0]}, not a launched run's (OUT/{SHARDS_FOLDER} and the merged run): "
                "choose another --out"
            )
        if (out / CONFIG_FILE).exists():
            held = read_json(out / CONFIG_FILE).get("config_hash")
            if held != config_hash:
                raise ConfigError(
                    f"--out {out}: holds run {str(held)[:12]}, this is run {config_hash[:12]} (another configuration): "
                    "choose another --out"
                )
    if shards_dir.exists():
        expected = {*names, *(f"{n}.log" for n in names)}
        stray = sorted(p.name for p in shards_dir.iterdir() if p.name not in expected)
        if stray:
            raise ConfigError(
                f"{shards_dir}: holds {stray[0]}, not one of the {k} shards of --shards {k} (launched with another "
                "K?): choose another --out, or the K it was launched with"
            )
    dirs = [shards_dir / n for n in names]
    finished: set[str] = set()
    for i, path in enumerate(dirs, 1):
        claim = path / CONFIG_FILE
        if claim.exists():
            old = read_json(claim)
            shard = (old.get("config") or {}).get("shard") if isinstance(old.get("config"), dict) else None
            if old.get("config_hash") != config_hash or shard != f"{i}/{k}":
                raise ConfigError(
                    f"{path}: holds shard {shard} of run {str(old.get('config_hash'))[:12]}, not shard {i}/{k} of "
                    f"run {config_hash[:12]}: choose another --out"
                )
        holder = writer_of(path)
        if holder:
            raise ConfigError(f"{path} is being written by {holder}: wait for it to end, then launch again")
        if (out / SAMPLES_FILE).exists() and (path / SAMPLES_FILE).exists():  # compared with the merge below
            finished |= {
                work_key(r["id"], record_epoch(r)) for _, r in iter_jsonl(path / SAMPLES_FILE, strict=False)
                if isinstance(r.get("id"), str) and r.get("status") == "ok"
            }  # fmt: skip
    if (out / SAMPLES_FILE).exists():
        merged = {
            work_key(r["id"], record_epoch(r)) for _, r in iter_jsonl(out / SAMPLES_FILE, strict=False)
            if isinstance(r.get("id"), str) and r.get("status") == "ok"
        }  # fmt: skip
        extra = merged - finished
        if extra:
            raise ConfigError(
                f"--out {out}: the merged run holds {len(extra)} sample(s) no shard has (e.g. {min(extra)}: finished "
                "by a run into the merged directory itself), which merging again would drop: choose another --out"
            )
    return dirs


def _validate(config: RunConfig, k: int):
    """The run as ``harness run`` checks it, without running it: (resolved config, run key, OUT, each
    shard's number of pairs). Nothing is written."""
    from harness.execution.runner import Run
    from harness.execution.selection import select_samples

    # the whole run (its key, its default directory); no scoring worker started for a check
    run = Run(config.model_copy(update={"stream_scoring": "off"}), show_progress=False)
    try:
        totals = [
            len(select_samples(run.dataset, run.config.model_copy(update={"shard": f"{i}/{k}"}))) * config.epochs
            for i in range(1, k + 1)
        ]
        return run.config, run.config_hash, run.run_dir, totals
    finally:
        close = getattr(run.snapshot, "close", None)
        if close is not None:
            close()


def _start_ray(address: str | None):
    try:
        import ray
    except ImportError:
        raise HarnessError(f"--launcher ray needs Ray: {pip_install('ray')}") from None
    import logging

    options: dict[str, Any] = {"log_to_driver": False, "logging_level": logging.WARNING}
    if address is None:  # a local instance, for this launch only
        options.update(include_dashboard=False, object_store_memory=LOCAL_OBJECT_STORE_BYTES)
    try:
        ray.init(address=address, **options)
    except Exception as exc:  # noqa: BLE001 - unreachable, refused: one line
        where = f"the Ray cluster at {address}" if address else "a local Ray instance"
        raise HarnessError(f"--launcher ray: could not start or reach {where}: {' '.join(str(exc).split())}") from None
    return ray


def launch(argv: list[str], config: RunConfig, k: int, address: str | None) -> tuple[RunResults, Path] | int:
    """``harness run ... --shards K --launcher ray[=ADDRESS]``: ``argv``, the run's options as given (less
    ``--shards``, ``--launcher``, ``--shard``, ``--out``), run as K shards; returns the merged run's
    record and directory, or the exit status of a launch that did not get to the merge."""
    from harness.execution.lock import RunLock
    from harness.execution.merge import merge_runs

    config, config_hash, default_out, totals = _validate(config, k)
    out = Path(config.out) if config.out else default_out
    lock = RunLock(out, purpose="launch").acquire()  # one launcher per OUT; its shards' rows are read while held
    began = False
    try:
        dirs = _check_out(out, k, config_hash)
        ray = _start_ray(address)
        began = True
        try:
            views = [
                ShardView(i, k, path, path.parent / f"{path.name}.log", total)
                for i, (path, total) in enumerate(zip(dirs, totals), 1)
            ]
            failed = _run_tasks(ray, argv, views, out)
        finally:
            ray.shutdown()
        if failed is not None:
            return failed
        record = merge_runs([v.path for v in views], out, shards_folder=SHARDS_FOLDER)
    finally:
        lock.release(remove_if_empty=not began)
    kept = out / SHARDS_FOLDER
    print(f"merged {k} shard(s) of run {record.run_id} -> {out} (the shards kept in {kept})", file=sys.stderr)
    return record, out


def _run_tasks(ray, base: list[str], views: list[ShardView], out: Path) -> int | None:
    """Submits the K tasks and watches them; None when every shard ended so that it merges, else the
    exit status (the first shard's that did not)."""
    (out / SHARDS_FOLDER).mkdir(exist_ok=True)
    task = ray.remote(num_cpus=1, max_retries=MAX_RETRIES, retry_exceptions=False, scheduling_strategy="SPREAD")(
        run_shard
    )
    cwd = os.getcwd()
    refs = {}
    for view in views:
        argv = [*base, "--shard", view.spec, "--launcher", "ray", "--out", str(view.path)]
        ref = task.options(name=f"harness shard {view.spec}").remote(
            argv, cwd, str(out / SHARDS_FOLDER), str(view.path), str(view.log)
        )
        refs[ref] = view
    progress = AllShardsProgress(views)
    progress.say(
        f"launched {len(views)} shard(s) as Ray tasks -> {out / SHARDS_FOLDER} "
        f"({progress.total} samples, {progress.at_start} finished before)"
    )
    pending = list(refs)
    # a kill (SIGTERM) stops the shards as Ctrl-C does
    previous = signal.signal(signal.SIGTERM, _interrupt) if _main_thread() else None
    try:
        while pending:
            ready, pending = ray.wait(pending, num_returns=len(pending), timeout=POLL_S)
            progress.look()
            for ref in ready:
                view = refs[ref]
                try:
                    view.result = ray.get(ref)
                except Exception as exc:  # noqa: BLE001 - its tries used up, or the task could not run
                    view.error = f"its Ray task failed after {MAX_RETRIES} retries: {type(exc).__name__}: " + " ".join(
                        str(exc).split()
                    )[:300]
                else:
                    if view.result["rc"] not in MERGEABLE:
                        view.error = f"exit {view.result['rc']}: {view.result.get('error') or '(no output)'}"
                view.look()
                if view.error is not None:
                    progress.say(f"shard {view.spec} failed: {view.error}; its log: {view.log}")
                else:
                    progress.say(f"shard {view.spec} done (exit {view.result['rc']}): {len(view.done)}/{view.total}")
    except KeyboardInterrupt:
        for ref in pending:
            ray.cancel(ref)  # KeyboardInterrupt in the task: its shard is stopped as on Ctrl-C (run_shard)
        ray.wait(pending, num_returns=len(pending), timeout=45)  # their results.json written
        progress.say("interrupted: the shards stopped, their finished samples kept; run the same command to resume")
        return 130
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    progress.line()
    bad = [v for v in views if v.error is not None]
    if not bad:
        return None
    print(
        f"error: {len(bad)} of {len(views)} shard(s) did not finish ({', '.join(v.spec for v in bad)}): nothing "
        "merged; run the same command again to resume them (finished samples are kept)",
        file=sys.stderr,
    )
    first = bad[0].result
    return first["rc"] if first is not None and first["rc"] > 0 else 3


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()

