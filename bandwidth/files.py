"""Reading and writing the tool's files so that nothing is silently lost and nothing blocks.

Every results file the tool writes (``--json``, ``--save-baseline``, ``--csv``, ``--plot``, the
ceiling's ``--json``, the gate reports) is written to a temporary file in the same folder, flushed
to disk and renamed over the target: the rename is atomic, so the target holds either its old
content or the whole new one. A symlink is written through: its target gets the new content and
the link stays; a symlink loop is refused in one line. Any failure (a full filesystem, a read-only
one, no permission) removes the temporary file, leaves the old file as it was and is one
ConfigError naming the file (exit status 2).

Every file the tool reads (a baseline, a result document, a hosts file, a network matrix) must
be a regular file: a FIFO, a socket or a device would block the reader or feed it without end,
so it is refused with one line before it is opened.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from pathlib import Path
from typing import IO, Iterator

from bandwidth.errors import ConfigError


def check_regular_file(path: str | Path, what: str = "") -> None:
    """Refuse a path that exists but is not a regular file (a FIFO, socket, device, folder),
    before anything opens it. A missing file is left to the reader (its own message)."""
    label = f"{what} {str(path)!r}" if what else repr(str(path))
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return
    if stat.S_ISDIR(mode):
        raise ConfigError(f"{label} is a folder, not a file")
    if not stat.S_ISREG(mode):
        raise ConfigError(f"{label} is not a regular file (a FIFO, socket or device); give a "
                          "file")


def check_output_target(path: str | Path, what: str = "") -> None:
    """Refuse an output path that exists but is not a regular file: renaming over a FIFO or a
    device would replace it, writing into it would block or go nowhere."""
    check_regular_file(path, what)


def through_links(path: str | Path, what: str = "") -> Path:
    """The file an output path names: a symlink is followed to its target (written there, as
    ``open()`` would; the link itself stays), a dangling one to the file it would create; a
    symlink loop is one ConfigError."""
    target = Path(path)
    if not target.is_symlink():
        return target
    try:
        return Path(os.path.realpath(target, strict=True))
    except FileNotFoundError:
        return Path(os.path.realpath(target))
    except OSError as exc:
        label = f"{what} {str(path)!r}" if what else repr(str(path))
        if exc.errno == errno.ELOOP:
            raise ConfigError(f"{label} is a symlink loop; give a file") from None
        raise ConfigError(f"{label}: cannot follow the symlink ({exc.strerror})") from None


def _new_mode(target: Path) -> int:
    """The mode the file gets: the old file's, or what a plain open() would give under the
    umask."""
    try:
        return stat.S_IMODE(os.stat(target).st_mode)
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


@contextlib.contextmanager
def atomic_output(path: str | Path, what: str = "", binary: bool = False,
                  newline: str | None = None) -> Iterator[IO]:
    """A file object whose content replaces ``path`` as a whole when the block ends without an
    error; on any error the temporary file is removed and the old ``path`` is untouched. An
    OSError (on writing, flushing or renaming) becomes one ConfigError naming the file."""
    target = through_links(path, what)
    label = what or "results"
    check_output_target(target, what)
    tmp_name = None
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp",
                                        dir=str(target.parent))
        with os.fdopen(fd, "wb" if binary else "w", newline=newline) as out:
            yield out
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp_name, _new_mode(target))
        os.replace(tmp_name, target)
        tmp_name = None
    except OSError as exc:
        raise ConfigError(f"cannot write {label} file {str(target)!r}: "
                          f"{exc.strerror or exc}; the old file is left as it was") from None
    finally:
        if tmp_name is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp_name)


def write_atomic(path: str | Path, content: str | bytes, what: str = "") -> None:
    """Replace ``path`` with ``content`` as a whole, or leave it as it was (see atomic_output)."""
    with atomic_output(path, what, binary=isinstance(content, bytes)) as out:
        out.write(content)


def append_atomic(path: str | Path, content: str, what: str = "") -> None:
    """``path``'s old content and ``content`` after it, written as a whole (a markdown summary
    that is appended to, as GitHub's step summary is)."""
    check_regular_file(path, what)
    try:
        old = Path(path).read_text() if Path(path).exists() else ""
    except OSError as exc:
        raise ConfigError(f"cannot read {what or 'the'} file {str(path)!r}: "
                          f"{exc.strerror}") from None
    write_atomic(path, old + content, what)
