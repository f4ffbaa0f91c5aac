"""Output files: checked before work starts, written atomically (temp file + rename).

An interrupted command never leaves a truncated output: the data goes to a temporary file
in the target's directory, is flushed to disk, and replaces the target with ``os.replace``
(atomic on POSIX and Windows when both are on one file system; Python docs, os.replace).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from mosaic.errors import MosaicInputError

MAX_PATH_CHARS = 4096  # PATH_MAX on Linux (limits.h)


def check_output_file(path: str | Path, option: str,
                      inputs: Iterable[str | Path] = ()) -> Path:
    """Refuse, before any work, an output file that cannot be written.

    The parent directory must exist and be writable, the path must not be a directory, and
    it must not be one of the command's ``inputs`` (writing would replace what it reads; a
    run record's ``FILE#ID`` names FILE).
    """
    path = Path(path)
    text = str(path)
    if not text or len(text) > MAX_PATH_CHARS or "\0" in text:
        raise MosaicInputError(f"{option}: not a usable path ({len(text)} characters)")
    _refuse_unexpanded_home(path, option)
    for source in inputs:
        if _same_file(path, Path(str(source).split("#", 1)[0])):
            raise MosaicInputError(f"{option} {_short(path)}: is the input file; writing it "
                                   "would replace what the command reads; give another name")
    parent = path.parent if str(path.parent) else Path(".")
    try:
        if path.is_dir():
            raise MosaicInputError(f"{option} {_short(path)}: is a directory; give a file name")
        if not parent.is_dir():
            raise MosaicInputError(f"{option} {_short(path)}: directory {_short(parent)} does "
                                   "not exist; create it first")
    except OSError as exc:  # name too long, ...
        raise MosaicInputError(f"{option} {_short(path)}: {exc.strerror or exc}") from None
    _check_can_create_in(parent, f"{option} {_short(path)}: directory {_short(parent)}")
    return path


def _refuse_unexpanded_home(path: Path, option: str) -> None:
    """A path that starts with a home ('~' or '~login' of an existing login) where no such
    directory exists here: the shell expands it only unquoted at the start of a word (not in
    `--plot=~/figs`), and the rest of mosaic does not, so the output would go to a directory
    named '~' under this one (a trial's `--plot '~/figs'` made one: a `rm -rf ~` away from
    the user's home). A '~' word that names no home (``~draft.json``) is left as typed, as
    the shell and os.path.expanduser leave it (POSIX 2.6.1, tilde expansion)."""
    head = path.parts[0] if path.parts else ""
    if not head.startswith("~") or Path(head).exists():
        return
    home = Path(os.path.expanduser(head))
    if str(home) != head:
        raise MosaicInputError(f"{option} {_short(path)}: '~' is not expanded here (the shell "
                               f"expands it only unquoted at the start of a word); give the "
                               f"full path ({home / Path(*path.parts[1:])})")


def _same_file(a: Path, b: Path) -> bool:
    """Whether two paths name one existing file (links and relative paths resolved)."""
    try:
        return a.is_file() and b.is_file() and os.path.samefile(a, b)
    except OSError:
        return False


def _check_can_create_in(directory: Path, what: str) -> None:
    """Create and remove a scratch file in ``directory``: permission bits do not say whether
    a file can be made there (root passes ``os.access`` on /proc, a read-only mount, ...)."""
    try:
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".mosaic-check-"):
            pass
    except OSError as exc:
        # a pseudo file system (/proc, /sys) answers creating a file with "No such file or
        # directory" for a directory that is there (a trial): say what it means
        why = ("no file can be created there" if isinstance(exc, FileNotFoundError)
               and directory.is_dir() else exc.strerror or str(exc))
        raise MosaicInputError(f"{what} is not writable ({why})") from None


def prepare_output_dir(path: str | Path, option: str) -> Path:
    """Create an output directory (and its parents) before any work, or a one-line error."""
    path = Path(path)
    if len(str(path)) > MAX_PATH_CHARS:
        raise MosaicInputError(f"{option}: path longer than {MAX_PATH_CHARS} characters")
    _refuse_unexpanded_home(path, option)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise MosaicInputError(f"{option} {_short(path)}: exists and is not a directory"
                               ) from None
    except OSError as exc:
        raise MosaicInputError(f"{option} {_short(path)}: cannot create the directory: "
                               f"{exc.strerror or exc}") from None
    _check_can_create_in(path, f"{option} {_short(path)}: directory")
    return path


def _short(path: Path) -> str:
    text = str(path)
    return text if len(text) <= 120 else f"{text[:60]}...{text[-40:]}"


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary path next to ``path``; on success it replaces ``path`` atomically.

    For writers that want a file name (matplotlib's savefig, pandas' to_csv): write to the
    yielded path; on an exception the temporary file is removed and ``path`` is untouched.
    """
    path = Path(path)
    if path.is_dir():  # (named as given, not as the temporary file the error would name)
        raise MosaicInputError(f"{_short(path)}: is a directory; give a file name")
    given = path
    stream = path.is_symlink() and _links_through_proc(path)  # /dev/stdout: an open stream
    if path.is_symlink() and not stream:  # write through the link to its target; the link
        path = Path(os.path.realpath(path))  # stays a link
    if stream or (path.exists() and not path.is_file()):  # /dev/null, a FIFO, a pipe:
        with _device_write(given) as temp:  # written into, never replaced
            yield temp
        return
    try:
        handle, temp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp",
                                             dir=path.parent if str(path.parent) else ".")
    except OSError as exc:
        raise MosaicInputError(f"{_short(path)}: cannot write there "
                               f"({exc.strerror or exc})") from None
    os.close(handle)
    temp = Path(temp_name)
    try:
        yield temp
        with open(temp, "rb+") as written:
            os.fsync(written.fileno())
        os.chmod(temp, 0o666 & ~_umask())
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def _links_through_proc(path: Path) -> bool:
    """Whether a hop of the link chain from ``path`` enters /proc (/dev/stdout ->
    /proc/self/fd/1): an open stream, which a replacement would cut off."""
    for _ in range(40):  # the kernel's own limit on a chain of links
        if not path.is_symlink():
            return False
        hop = os.readlink(path)
        path = Path(hop) if os.path.isabs(hop) else path.parent / hop
        if str(path).startswith("/proc/"):
            return True
    return False


@contextlib.contextmanager
def _device_write(path: Path) -> Iterator[Path]:
    """A temporary file whose bytes go into the special file ``path`` (a device such as
    /dev/null, or a FIFO) on success: replacing it would put an ordinary file in its place
    (as root, a /dev/null that every other program then reads)."""
    handle, temp_name = tempfile.mkstemp(prefix=".mosaic-out.", suffix=".tmp")
    os.close(handle)
    temp = Path(temp_name)
    try:
        yield temp
        try:
            with open(path, "ab") as target:  # append: never truncate a redirected stream
                target.write(temp.read_bytes())
        except OSError as exc:
            raise MosaicInputError(f"{_short(path)}: cannot write there "
                                   f"({exc.strerror or exc})") from None
    finally:
        temp.unlink(missing_ok=True)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_bytes_atomic(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically."""
    with atomic_path(path) as temp:
        temp.write_bytes(data)


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write UTF-8 ``text`` to ``path`` atomically."""
    write_bytes_atomic(path, text.encode("utf-8"))
