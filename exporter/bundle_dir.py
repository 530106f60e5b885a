"""Atomic session bundles: written in a hidden sibling, renamed when complete.

A bundle ``<parent>/<name>`` is written in ``<parent>/.<name>.partial``
(:meth:`BundleDir.create`) and renamed to its final path only when the
``with BundleDir() as b:`` block completes, so a reader of ``<parent>``
never sees a half-written bundle under its final name. If the block raises
anything, the partial directory is removed. An ``OSError`` about the bundle
(one naming a path inside it, a full disk or quota ``ENOSPC``/``EDQUOT``,
``EFBIG``, ``EROFS``, ``EIO``, or the final rename failing) is re-raised as
:class:`BundleWriteError`, whose message names the bundle's final path;
the CLI turns it into exit status 2. Other exceptions pass unchanged.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path
from types import TracebackType

_DISK = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EIO})


class BundleWriteError(OSError):
    """The bundle ``path`` could not be written; nothing was left at ``path``."""

    def __init__(self, path: Path, cause: OSError) -> None:
        why = cause.strerror or str(cause) or type(cause).__name__
        super().__init__(cause.errno, f"cannot write session bundle {path}: {why}")
        self.path = path

    def __str__(self) -> str:
        return str(self.args[1])


def partial_path(final: Path) -> Path:
    """``<parent>/.<name>.partial`` for ``final`` = ``<parent>/<name>``."""
    return final.with_name(f".{final.name}.partial")


class BundleDir:
    """One bundle being written (see the module doc)."""

    def __init__(self) -> None:
        self.final: Path | None = None
        self.partial: Path | None = None

    def create(self, final: Path) -> Path:
        """Make the partial directory for ``final`` (parents as needed) and return it.

        Raises :class:`BundleWriteError` when it cannot be made, or when
        ``final`` or its partial directory already exists.
        """
        self.final, tmp = final, partial_path(final)
        try:
            final.parent.mkdir(parents=True, exist_ok=True)
            if final.exists():
                raise FileExistsError(errno.EEXIST, "already exists", str(final))
            tmp.mkdir()
        except OSError as e:
            raise BundleWriteError(final, e) from e
        self.partial = tmp
        return tmp

    def __enter__(self) -> BundleDir:
        return self

    def _about_bundle(self, e: OSError) -> bool:
        if e.errno in _DISK:
            return True
        tmp = str(self.partial) if self.partial else None
        return tmp is not None and any(
            isinstance(f, str | bytes | os.PathLike) and os.fsdecode(f).startswith(tmp)
            for f in (e.filename, e.filename2))

    def __exit__(self, typ: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.partial is None or self.final is None:
            return
        if exc is None:
            try:
                os.rename(self.partial, self.final)
                return
            except OSError as e:
                shutil.rmtree(self.partial, ignore_errors=True)
                raise BundleWriteError(self.final, e) from e
        shutil.rmtree(self.partial, ignore_errors=True)
        if isinstance(exc, OSError) and not isinstance(exc, BundleWriteError) \
                and self._about_bundle(exc):
            raise BundleWriteError(self.final, exc) from exc
