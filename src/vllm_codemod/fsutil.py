"""Small filesystem primitives the engine's crash-safety rests on.

Every write in a tree goes through :func:`atomic_write`: a temp file in the target's own
directory, named with :data:`TEMP_MARK` and our pid so that a run killed between write
and rename leaves debris that the next run can recognise as ours (and nothing else) and
remove.  The written file keeps the owner, group and mode of the file it replaces (a
Dockerfile runs us as root; the tree may belong to someone else), and a symlinked target
is written *through*, so the link itself stays as it was.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import logging
import os
import re
import stat
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator, List, Optional, Tuple

from .errors import CodemodError, EnvironmentProblem, NotARegularFile

log = logging.getLogger(__name__)

#: every temp file we create is ``.<name>.vllm-codemod-<pid>.tmp`` beside its target
TEMP_MARK = ".vllm-codemod-"
_TEMP_RE = re.compile(r"^\.(?P<name>.+)\.vllm-codemod-(?P<pid>[0-9]+)\.tmp$")


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> Optional[str]:
    """Hash of a file's bytes, or None when it does not exist; anything but a regular file
    (a FIFO would block the read) is refused, as for every file the tool reads."""
    try:
        return sha256_bytes(read_regular_file(path))
    except FileNotFoundError:
        return None


def temp_path_for(target: Path) -> Path:
    return target.parent / f".{target.name}{TEMP_MARK}{os.getpid()}.tmp"


def _owner_of(path: Path) -> Tuple[int, int]:
    st = os.stat(path)
    return st.st_uid, st.st_gid


def owner_kept(path: Path) -> Optional[Tuple[int, int]]:
    """None when a replacement of ``path`` can keep its owner and group; else that
    owner, which the OS will not let us give a new file (a non-root user patching
    another user's file).  Asks the OS for real (``os.chown`` on a scratch file beside
    ``path``, removed at once; a killed run leaves it for :func:`sweep_temp_files`)."""
    target = Path(os.path.realpath(path))
    try:
        st = os.stat(target)
    except FileNotFoundError:
        return None
    owner = (st.st_uid, st.st_gid)
    if owner == (os.geteuid(), os.getegid()):
        return None
    probe = temp_path_for(target)
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except OSError:
        return None  # the writability probes report this directory
    try:
        os.close(fd)
        os.chown(probe, *owner)
    except PermissionError:
        return owner
    finally:
        try:
            os.unlink(probe)
        except OSError:
            pass
    return None


def _give_to(fd_or_path: object, owner: Tuple[int, int]) -> None:
    """Hand a file we created to ``owner``: always as root, else the group if we may.

    Without privileges we cannot give a file away; it then stays ours, which is what any
    other tool run by this user would do too (never root behind the user's back).
    """
    uid, gid = owner
    chown = os.fchown if isinstance(fd_or_path, int) else os.chown
    try:
        if os.geteuid() == 0:
            chown(fd_or_path, uid, gid)  # type: ignore[arg-type]
        elif gid != os.getegid():
            chown(fd_or_path, -1, gid)  # type: ignore[arg-type]
    except PermissionError:
        pass


def _keep_owner(tmp: Path, owner: Tuple[int, int]) -> None:
    """Give the temp file that replaces a file that file's owner and group, so the
    replace does not hand it to whoever runs the tool; where the OS refuses (checked
    up front by :func:`owner_kept`, and allowed by the user), keep the group if we may."""
    if owner == (os.geteuid(), os.getegid()):
        return
    try:
        os.chown(tmp, *owner)
    except PermissionError:
        _give_to(str(tmp), (os.geteuid(), owner[1]))


def make_dirs(directory: Path) -> None:
    """``mkdir -p`` whose new directories belong to the owner of the directory above them."""
    missing: List[Path] = []
    current = directory
    while not current.exists():
        missing.append(current)
        current = current.parent
    for path in reversed(missing):
        try:
            path.mkdir()
        except FileExistsError:
            continue
        except OSError as exc:
            raise EnvironmentProblem(path, exc) from None
        _give_to(str(path), _owner_of(path.parent))


def atomic_write(path: Path, data: bytes, mode: Optional[int] = None) -> None:
    """Replace ``path`` with ``data`` so that readers (and a crash) see old or new, never half.

    A symlink is followed: its target file is replaced and the link is left alone.  The
    replaced file's mode, owner and group carry over (``mode`` overrides the mode); a new
    file gets ``mode`` (default 0644) and the owner of its directory.  Failures raise
    :class:`EnvironmentProblem` naming ``path``; the temp file never outlives a failure
    we see (a SIGKILL leaves it for :func:`sweep_temp_files`).
    """
    target = Path(os.path.realpath(path))
    try:
        st: Optional[os.stat_result] = os.stat(target)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise EnvironmentProblem(path, exc) from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise EnvironmentProblem(
            path, hint="not a regular file; refusing to replace it", errno=errno.EINVAL
        )
    make_dirs(target.parent)
    if mode is None:
        mode = stat.S_IMODE(st.st_mode) if st is not None else 0o644
    owner = (st.st_uid, st.st_gid) if st is not None else _owner_of(target.parent)
    tmp = temp_path_for(target)
    try:
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        except FileExistsError:  # left by a killed run whose pid we now have
            os.unlink(tmp)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            _keep_owner(tmp, owner)  # before chmod: chown clears set-id bits
            os.fchmod(fd, mode)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise EnvironmentProblem(path, exc) from None
        raise


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return False  # ours, and we are not writing it now
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_temp_files(
    directories: Iterable[Path],
    name: Optional[str] = None,
    only_dead: bool = False,
    dry_run: bool = False,
) -> List[Path]:
    """Remove temp files a killed run of ours left in ``directories`` (only our pattern).

    ``name`` limits the sweep to the temp files of one target file; ``only_dead`` keeps
    those whose writer is still running (for files no lock protects, like a run config);
    ``dry_run`` only lists them (read-only commands report debris, never remove it).
    """
    removed: List[Path] = []
    for directory in sorted(set(directories)):
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            match = _TEMP_RE.match(entry.name)
            if match is None or not entry.is_file(follow_symlinks=False):
                continue
            if name is not None and match.group("name") != name:
                continue
            if only_dead and _pid_alive(int(match.group("pid"))):
                continue
            if dry_run:
                removed.append(Path(entry.path))
                continue
            try:
                os.unlink(entry.path)
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise EnvironmentProblem(entry.path, exc) from None
            removed.append(Path(entry.path))
    return removed


def remove_file(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise EnvironmentProblem(path, exc) from None


def remove_dir_if_empty(path: Path) -> bool:
    """``rmdir path``: True when it is gone (or was never there), False when it is kept
    because something is in it (or it is not a directory: a symlink is never followed)."""
    try:
        os.rmdir(path)
    except FileNotFoundError:
        return True
    except OSError as exc:
        if exc.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
            return False
        raise EnvironmentProblem(path, exc) from None
    return True


def remove_empty_dirs(start: Path, stop: Path) -> None:
    """Remove ``start`` and its parents while they are empty, never going above ``stop``.

    Only for directories the tool owns entirely (inside its state directory): in the
    tree, a directory is removed only when the manifest records that apply created it
    (see :func:`remove_dir_if_empty` and the journal's ``rmdir`` steps).
    """
    current = start
    while current != stop and stop in current.parents:
        try:
            current.rmdir()
        except OSError:
            return
        current = current.parent


def read_regular_file(path: Path) -> bytes:
    """The bytes of ``path`` (symlinks followed), refusing anything but a regular file.

    Opening a FIFO for reading would block until a writer appears, and a device is not
    a file we may replace, so we open without blocking and look before reading.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except (FileNotFoundError, IsADirectoryError):
        raise
    except OSError as exc:
        raise EnvironmentProblem(path, exc) from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        if not stat.S_ISREG(st.st_mode):
            raise NotARegularFile(path, _kind(st.st_mode))
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISSOCK, "socket"),
    ):
        if test(mode):
            return name
    return "special file"


@contextmanager
def tree_lock(directory: Path, timeout: float) -> Iterator[None]:
    """Hold an exclusive advisory lock on the vllm package directory itself.

    Locking the directory's own file descriptor instead of a lock file means the
    lock leaves nothing behind in the tree, so revert can be byte-exact.
    """
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError as exc:
        raise EnvironmentProblem(directory, exc, "cannot open it to lock the tree") from None
    try:
        deadline = time.monotonic() + timeout
        waiting = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    raise
                if time.monotonic() >= deadline:
                    raise CodemodError(
                        f"{directory}: another vllm-codemod run holds the lock; "
                        "wait for it to finish and run again"
                    ) from None
                if not waiting:
                    log.info(
                        "%s: another run holds the lock; waiting up to %gs", directory, timeout
                    )
                    waiting = True
                time.sleep(0.05)
        log.debug("lock taken on %s", directory)
        yield
    finally:
        os.close(fd)
        log.debug("lock released on %s", directory)
