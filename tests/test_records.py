"""harness.records against a hostile file system (issue 22): outputs are written only to regular files
(or new paths), through symlinks, never over a device, FIFO or folder; inputs are read only from
regular files within a size cap, and a FIFO is never opened (the open would block)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from harness.errors import ConfigError, HarnessError
from harness.records import (
    MAX_DATA_BYTES,
    MAX_SMALL_BYTES,
    JsonlAppender,
    check_output_path,
    iter_jsonl,
    load_finished,
    open_input,
    read_input,
    read_input_text,
    read_json,
    write_bytes_atomic,
    write_json_atomic,
)
from hostile_fs import deadline, make_device, unblock_fifo


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "fifo"
    os.mkfifo(path)
    yield path
    unblock_fifo(path)  # a wrong implementation blocked on it is released


@pytest.fixture
def device(tmp_path):
    return make_device(tmp_path / "null")


def only(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


# ---------------------------------------------------------------------------- outputs
def test_write_bytes_atomic_refuses_a_fifo_and_leaves_it(fifo, tmp_path):
    with deadline(10), pytest.raises(HarnessError, match="is a FIFO, not a regular file"):
        write_bytes_atomic(fifo, b"data")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert only(tmp_path) == ["fifo"], "a temp file was left"


def test_write_bytes_atomic_refuses_a_device_and_a_link_to_one(device, tmp_path):
    link = tmp_path / "stdout"  # as /dev/stdout: a symlink to a device
    link.symlink_to(device)
    for path in (device, link):
        with pytest.raises(HarnessError, match="is a character device"):
            write_json_atomic(path, {"a": 1})
    assert stat.S_ISCHR(os.stat(device).st_mode)
    assert link.is_symlink() and Path(os.readlink(link)) == device


def test_write_bytes_atomic_refuses_a_folder(tmp_path):
    (tmp_path / "d").mkdir()
    with pytest.raises(HarnessError, match="is a directory"):
        write_bytes_atomic(tmp_path / "d", "x")
    assert (tmp_path / "d").is_dir()


def test_write_bytes_atomic_writes_through_a_symlink_and_keeps_it(tmp_path):
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "out.json"
    target.write_text("old")
    os.chmod(target, 0o600)
    link = tmp_path / "link.json"
    link.symlink_to(target)
    write_json_atomic(link, {"new": True})
    assert link.is_symlink() and link.resolve() == target
    assert target.read_text() == '{\n  "new": true\n}\n'
    assert only(tmp_path / "real") == ["out.json"] and only(tmp_path) == ["link.json", "real"]


def test_write_bytes_atomic_through_a_relative_chain_and_a_dangling_link(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "first").symlink_to("second")  # relative, resolved against its own folder
    (tmp_path / "a" / "second").symlink_to("../b/final.txt")
    write_bytes_atomic(tmp_path / "a" / "first", "through two links")  # dangling: the target is created
    assert (tmp_path / "b" / "final.txt").read_text() == "through two links"
    assert (tmp_path / "a" / "first").is_symlink() and (tmp_path / "a" / "second").is_symlink()


def test_a_symlink_loop_is_refused(tmp_path):
    (tmp_path / "x").symlink_to("y")
    (tmp_path / "y").symlink_to("x")
    with pytest.raises(HarnessError, match="symbolic link loop"):
        write_bytes_atomic(tmp_path / "x", "data")
    with pytest.raises(HarnessError, match="^--out .*symbolic link loop"):
        check_output_path(tmp_path / "x", "--out")
    assert (tmp_path / "x").is_symlink() and (tmp_path / "y").is_symlink()


def test_check_output_path_only_accepts_regular_files_or_new_paths(tmp_path, fifo, device):
    regular = tmp_path / "r.json"
    regular.write_text("{}")
    link = tmp_path / "link-to-regular"
    link.symlink_to(regular)
    assert check_output_path(regular, "--out") == regular
    assert check_output_path(link, "--out") == link
    assert check_output_path(tmp_path / "new" / "deeper.json", "--out") == tmp_path / "new" / "deeper.json"
    with pytest.raises(HarnessError, match=r"^--out .*fifo: is a FIFO; only regular files are written$"):
        check_output_path(fifo, "--out")
    with pytest.raises(HarnessError, match="^--plot .*: is a character device; only regular files are written$"):
        check_output_path(device, "--plot")
    with pytest.raises(HarnessError, match="^--out .*: is a folder, not a file$"):
        check_output_path(tmp_path, "--out")
    # a folder output (a run directory) refuses them as well, saying what they are
    with pytest.raises(HarnessError, match="^--out .*fifo: is a FIFO, not a folder$"):
        check_output_path(fifo, "--out", directory=True)
    with pytest.raises(HarnessError, match="^--out .*: is a file, not a folder$"):
        check_output_path(regular, "--out", directory=True)
    assert check_output_path(tmp_path, "--out", directory=True) == tmp_path
    with pytest.raises(HarnessError, match=r"cannot be created \(.*r.json is a file\)"):
        check_output_path(regular / "below" / "x.json", "--out")


def test_check_output_path_literal_dev_null_and_dev_stdout():
    """The paths the issue names, checked only (nothing is written)."""
    with pytest.raises(HarnessError, match="/dev/null: is a character device"):
        check_output_path("/dev/null", "--out")
    if os.path.exists("/dev/stdout"):
        target = os.stat("/dev/stdout").st_mode
        if not stat.S_ISREG(target):  # a terminal or a pipe (pytest's capture may make it a file)
            with pytest.raises(HarnessError, match="^--out /dev/stdout: is a"):
                check_output_path("/dev/stdout", "--out")


# ---------------------------------------------------------------------------- inputs
def test_read_input_refuses_a_fifo_without_opening_it(fifo):
    with deadline(10):
        with pytest.raises(HarnessError, match=r"^--data-path .*fifo: is a FIFO; only regular files are read$"):
            read_input(fifo, "--data-path")
        with pytest.raises(ConfigError, match="is a FIFO"):
            read_input_text(fifo, "--config", ConfigError, MAX_SMALL_BYTES)
        with pytest.raises(HarnessError, match="is a FIFO"):
            read_json(fifo)
        with pytest.raises(HarnessError, match="^--generations .*is a FIFO"):
            list(iter_jsonl(fifo, option="--generations"))


def test_read_input_refuses_dev_zero_and_a_device():
    for reader in (read_input, read_input_text, read_json):
        with pytest.raises(HarnessError, match="^--price-table /dev/zero: is a character device"):
            reader("/dev/zero", "--price-table")
    with pytest.raises(HarnessError, match="/dev/zero: is a character device"):
        next(iter_jsonl("/dev/zero"))


def test_read_input_size_cap(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_bytes(b"x" * 2048)
    with pytest.raises(HarnessError, match=r"^--metadata .*big.yaml: 2 KiB, larger than the 1 KiB limit$"):
        read_input(path, "--metadata", max_bytes=1024)
    assert read_input(path, max_bytes=2048) == b"x" * 2048
    lines = tmp_path / "g.jsonl"
    lines.write_text('{"id": "a"}\n' * 100)
    with pytest.raises(HarnessError, match="larger than the 1 KiB limit"):
        list(iter_jsonl(lines, max_bytes=1024))
    assert len(list(iter_jsonl(lines))) == 100
    # the documented defaults: datasets may be large, option files are small
    assert MAX_DATA_BYTES == 4 * 2**30 and MAX_SMALL_BYTES == 16 * 2**20


def test_read_input_missing_folder_and_a_link_to_a_file(tmp_path):
    with pytest.raises(HarnessError, match=r"^--config .*nope.yaml: file not found$"):
        read_input(tmp_path / "nope.yaml", "--config")
    with pytest.raises(HarnessError, match=r"^--config .*: is a folder, not a file$"):
        read_input(tmp_path, "--config")
    real = tmp_path / "real.json"
    real.write_text('{"a": 1}')
    (tmp_path / "link.json").symlink_to(real)
    assert read_json(tmp_path / "link.json") == {"a": 1}
    with open_input(tmp_path / "link.json") as f:
        assert f.read() == b'{"a": 1}'


def test_jsonl_appender_and_load_finished_refuse_a_fifo(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    os.mkfifo(run / "samples.jsonl")
    try:
        with deadline(10):
            with pytest.raises(HarnessError, match="samples.jsonl: is a FIFO; only regular files are written"):
                JsonlAppender(run / "samples.jsonl")
            with pytest.raises(HarnessError, match="samples.jsonl: is a FIFO"):
                load_finished(run)
    finally:
        unblock_fifo(run / "samples.jsonl")
    assert stat.S_ISFIFO(os.lstat(run / "samples.jsonl").st_mode)
