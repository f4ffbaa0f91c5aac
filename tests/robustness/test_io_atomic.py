"""Atomic writes and output-path checks (mosaic.io_atomic)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from mosaic.errors import MosaicInputError
from mosaic.io_atomic import (
    atomic_path,
    check_output_file,
    prepare_output_dir,
    write_text_atomic,
)


def test_write_replaces_whole_file_and_leaves_no_temp(tmp_path):
    target = tmp_path / "out.json"
    target.write_text("old content that is longer than the new one")
    write_text_atomic(target, "new")
    assert target.read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


def test_interrupted_write_keeps_the_old_file(tmp_path):
    target = tmp_path / "out.csv"
    target.write_text("complete old file\n")
    with pytest.raises(KeyboardInterrupt), atomic_path(target) as temp:
        temp.write_text("half of the new")
        raise KeyboardInterrupt
    assert target.read_text() == "complete old file\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.csv"]


def test_written_file_has_normal_permissions(tmp_path):
    target = tmp_path / "x.txt"
    write_text_atomic(target, "x")
    mask = os.umask(0)
    os.umask(mask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~mask


@pytest.mark.parametrize(("make", "words"), [
    (lambda d: d / "missing" / "x.json", "does not exist"),
    (lambda d: d, "is a directory"),
    (lambda d: d / ("x" * 5000), "not a usable path"),
])
def test_bad_output_files_are_refused_before_work(tmp_path, make, words):
    with pytest.raises(MosaicInputError, match=words):
        check_output_file(make(tmp_path), "--out")


def test_output_dir_is_created_or_refused(tmp_path):
    assert prepare_output_dir(tmp_path / "a" / "b", "--plot").is_dir()
    (tmp_path / "file").write_text("")
    with pytest.raises(MosaicInputError, match="not a directory"):
        prepare_output_dir(tmp_path / "file", "--plot")


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux /proc")
def test_an_output_under_a_directory_no_file_can_be_made_in_is_refused_before_work():
    """Permission bits pass for root on /proc; creating a file there fails (fuzz_cli seed 0
    found `law fit --out /proc/forbidden.json` failing only after the fit)."""
    with pytest.raises(MosaicInputError, match="not writable") as refused:
        check_output_file("/proc/forbidden.json", "--out")
    # not the OS's "No such file or directory" for a directory that is there (a trial)
    assert "No such file" not in str(refused.value)


def test_a_symlinked_output_is_written_through_the_link(tmp_path):
    """--out LINK replaced the link with an ordinary file and left its target stale (a
    trial): the target gets the bytes and the link stays."""
    target = tmp_path / "real.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    write_text_atomic(link, "new")
    assert link.is_symlink() and target.read_text() == "new"


def test_a_special_file_is_written_into_not_replaced(tmp_path):
    """--out /dev/null replaced the device with an ordinary file (as root, for every other
    program; a trial): a special file is written into. A FIFO with a reader stands in for
    the device here."""
    import stat
    import threading

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_text()))
    reader.start()
    write_text_atomic(fifo, "through the pipe")
    reader.join(timeout=10)
    assert received == ["through the pipe"]
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_a_link_into_proc_fd_is_appended_through_not_replaced(tmp_path):
    """A link to /proc/self/fd/N (/dev/stdout) resolved to the redirect target and replaced
    it, losing what '>>' had written (review): such a link is written through, appending."""
    log = tmp_path / "log"
    log.write_text("KEEP\n")
    with open(log, "a") as handle:
        link = tmp_path / "out"
        link.symlink_to(f"/proc/{os.getpid()}/fd/{handle.fileno()}")
        if not Path(os.path.realpath(link)).exists():
            pytest.skip("no /proc here")
        write_text_atomic(link, "NEW\n")
    assert log.read_text() == "KEEP\nNEW\n"


def test_an_unexpanded_home_is_refused_not_made_a_directory(tmp_path, monkeypatch):
    """`plan --plot '~/figs'` (or --plot=~/figs, which no shell expands) made a directory
    named '~' under the working one; a '~' path that does not exist here is refused, with
    the path the user meant."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    meant = re.escape(f"({tmp_path}/home/figs)")
    with pytest.raises(MosaicInputError, match=rf"--plot ~/figs: '~' is not expanded here.*"
                                               rf"{meant}"):
        prepare_output_dir("~/figs", "--plot")
    assert not (tmp_path / "~").exists()
    with pytest.raises(MosaicInputError, match=r"--out ~/x\.json: '~' is not expanded"):
        check_output_file("~/x.json", "--out")
    (tmp_path / "~").mkdir()  # a directory of that name that is there is the user's own
    assert prepare_output_dir("~/figs", "--plot") == Path("~/figs")


def test_a_tilde_that_names_no_home_is_an_ordinary_name(tmp_path, monkeypatch):
    """A leading '~' that no shell would expand either (``~draft.json``, ``~nosuchuser/x``:
    POSIX 2.6.1 expands ``~login`` only for a login name that exists, and
    os.path.expanduser leaves such a word as it is) is the name the user typed, not an
    unexpanded home: it is written, not refused with 'give the full path'."""
    monkeypatch.chdir(tmp_path)
    assert check_output_file("~draft.json", "--out") == Path("~draft.json")
    assert prepare_output_dir("~no-such-user-here/figs", "--plot") == Path(
        "~no-such-user-here/figs")
    assert (tmp_path / "~no-such-user-here" / "figs").is_dir()
