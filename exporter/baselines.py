"""Named baselines: session bundles kept under a name for later ``diff`` runs.

``aaco-exporter baseline save NAME SESSION`` copies the bundle ``SESSION``
(without its ``regress/`` and ``report/`` outputs) to ``<store>/NAME/bundle``
and writes ``<store>/NAME/baseline.json``: the name, the bundle's session id,
kind and source path, the save time (UTC, ISO 8601) and a manifest
``{relative path: sha256}`` of every copied file. ``diff --baseline NAME``
resolves the name to the stored copy and checks the files it compares
against that manifest (a changed or missing file is an error, not a silent
comparison against something else).

Store location (:func:`store_dir`): ``--baseline-dir``, else the environment
variable ``AACO_BASELINE_DIR``, else ``$XDG_DATA_HOME/aaco-exporter/baselines``
(``~/.local/share/aaco-exporter/baselines`` when ``XDG_DATA_HOME`` is unset).

Errors: :class:`BaselineError` (a ``ValueError``) with a message naming the
name or path: bad name, unknown name, existing name without ``force``, a
directory that is not a session bundle, a stored file that no longer matches
its manifest.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exporter.bundle_dir import BundleDir

NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
ENV = "AACO_BASELINE_DIR"
_SKIP = ("regress", "report")  # outputs of diff/report, not part of what was measured


class BaselineError(ValueError):
    """A baseline could not be saved, found or trusted; the message says which and why."""


def store_dir(explicit: Path | str | None = None,
              environ: Mapping[str, str] | None = None) -> Path:
    """The baseline store: ``explicit``, else ``$AACO_BASELINE_DIR``, else
    ``$XDG_DATA_HOME/aaco-exporter/baselines`` (default ``~/.local/share/…``)."""
    env = os.environ if environ is None else environ
    if explicit:
        return Path(explicit)
    if env.get(ENV):
        return Path(env[ENV])
    data = env.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data) / "aaco-exporter" / "baselines"


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file's bytes (read in 1 MiB blocks)."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def checksum(bundle: Path, rels: Iterable[str]) -> dict[str, Any]:
    """``{"files": {rel: sha256}, "sha256": combined}`` of the files ``rels``
    that exist in ``bundle``; the combined digest hashes the sorted
    ``rel\\0sha256\\n`` lines, so it names exactly what was compared."""
    files = {r: sha256_file(bundle / r) for r in sorted(set(rels)) if (bundle / r).is_file()}
    h = hashlib.sha256("".join(f"{r}\0{d}\n" for r, d in files.items()).encode())
    return {"files": files, "sha256": h.hexdigest()}


@dataclass(frozen=True)
class Baseline:
    """A stored baseline: ``bundle`` is the copied session directory."""

    name: str
    root: Path
    meta: dict[str, Any]

    @property
    def bundle(self) -> Path:
        return self.root / "bundle"

    def verify(self, rels: Iterable[str]) -> None:
        """Raise :class:`BaselineError` if any of ``rels`` (present in the
        manifest) is missing or differs from its sha256 at save time."""
        manifest: dict[str, str] = self.meta.get("manifest", {})
        for r in rels:
            want = manifest.get(r)
            if want is None:
                continue
            p = self.bundle / r
            if not p.is_file():
                raise BaselineError(f"baseline {self.name!r}: {p} is missing")
            if sha256_file(p) != want:
                raise BaselineError(f"baseline {self.name!r}: {p} changed since it was saved "
                                    "(sha256 differs from baseline.json)")


def _check_name(name: str) -> None:
    if not NAME_RE.fullmatch(name):
        raise BaselineError(f"baseline name {name!r}: use 1-64 of A-Z a-z 0-9 . _ - "
                            "(starting with a letter or digit)")


def save(name: str, session: Path, store: Path, force: bool = False) -> Baseline:
    """Copy bundle ``session`` into ``store/name``; returns the stored :class:`Baseline`.

    The copy is atomic (written beside, renamed when complete); with ``force``
    an existing baseline of that name is replaced, otherwise it is an error."""
    _check_name(name)
    session = Path(session)
    info_path = session / "session.json"
    if not info_path.is_file():
        raise BaselineError(f"{session}: not a session bundle (no session.json)")
    try:
        info = json.loads(info_path.read_text())
    except (OSError, ValueError) as e:
        raise BaselineError(f"{info_path}: unreadable: {e}") from None
    final = store / name
    if final.exists() and not force:
        raise BaselineError(f"baseline {name!r} exists in {store}; pass --force to replace it")
    store.mkdir(parents=True, exist_ok=True)
    with BundleDir() as b:  # a replacement is written beside, then swapped in
        tmp = b.create(store / f".{name}.replace" if final.exists() else final)
        shutil.copytree(session, tmp / "bundle", ignore=lambda d, names: (
            [n for n in names if n in _SKIP] if Path(d) == session else []))
        files = sorted(p for p in (tmp / "bundle").rglob("*") if p.is_file())
        meta = {
            "name": name,
            "session_id": info.get("session_id"),
            "kind": info.get("kind"),
            "source": str(session.resolve()),
            "saved_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "manifest": {str(p.relative_to(tmp / "bundle")): sha256_file(p) for p in files},
        }
        (tmp / "baseline.json").write_text(json.dumps(meta, indent=2) + "\n")
    assert b.final is not None
    if b.final != final:
        shutil.rmtree(final)
        b.final.rename(final)
    return Baseline(name, final, meta)


def load(name: str, store: Path) -> Baseline:
    """The baseline ``name`` in ``store``; :class:`BaselineError` if there is none."""
    _check_name(name)
    root = store / name
    p = root / "baseline.json"
    if not p.is_file():
        have = ", ".join(b.name for b in list_all(store)) or "none"
        raise BaselineError(f"no baseline named {name!r} in {store} (saved: {have})")
    try:
        meta = json.loads(p.read_text())
    except (OSError, ValueError) as e:
        raise BaselineError(f"{p}: unreadable: {e}") from None
    return Baseline(name, root, dict(meta))


def list_all(store: Path) -> list[Baseline]:
    """Every readable baseline in ``store``, by name (an empty list if there is no store)."""
    out = []
    if store.is_dir():
        for d in sorted(store.iterdir()):
            p = d / "baseline.json"
            if d.is_dir() and NAME_RE.fullmatch(d.name) and p.is_file():
                try:
                    out.append(Baseline(d.name, d, dict(json.loads(p.read_text()))))
                except (OSError, ValueError):
                    continue
    return out


def resolve(ref: str | Path, store: Path) -> tuple[Path, Baseline | None]:
    """``diff --baseline REF``: a stored baseline's bundle when ``REF`` is a
    baseline name saved in ``store``, else ``REF`` as a bundle path.

    A name wins over a same-named relative directory; write ``./NAME`` for the
    directory. Raises :class:`BaselineError` when ``REF`` is neither."""
    s = str(ref)
    if NAME_RE.fullmatch(s) and (store / s / "baseline.json").is_file():
        b = load(s, store)
        return b.bundle, b
    if Path(s).is_dir():
        return Path(s), None
    if NAME_RE.fullmatch(s) and "/" not in s:
        load(s, store)  # raises, naming the store and the saved names
    raise BaselineError(f"--baseline {s}: neither a saved baseline nor a directory")
