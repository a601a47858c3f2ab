"""What dispatch chose for a tuned problem, remembered on disk, so that the first call in a
new process skips the database (and SQLAlchemy's import), the template and the compiler.

One JSON file beside the cubins maps (family, problem, device, template digest, dispatch
settings) to the chosen config, the cached cubin and the device's Target. An entry is used
only while every file the default database reads from (the local SQLite file and its WAL,
a team SQLite file, the shipped ``tuning_db/``) has the size and modification time it had
when the choice was made, and only while the cubin file and the device are the same; a team
database on a server cannot be checked cheaply, so with one configured nothing is
remembered. Any miss falls back to the full path, which writes the entry again.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path

from kgen.knobs import knobs

log = logging.getLogger("kgen.dispatch")
MEMO_VERSION = 1


def memo_path() -> Path:
    return knobs.cache_dir / "dispatch-memo.json"


def _sqlite_file(url: str) -> Path | None:
    prefix = "sqlite:///"
    return Path(url[len(prefix):]) if url.startswith(prefix) and len(url) > len(prefix) else None


def _stat(path: Path) -> list:
    try:
        st = path.stat()
    except OSError:
        return [str(path), None, None]
    return [str(path), st.st_mtime_ns, st.st_size]


def database_fingerprint() -> list | None:
    """Size and mtime of every file the default database reads; None when a layer is not a
    local file (its contents cannot be checked without connecting)."""
    files: list[Path] = []
    local = _sqlite_file(knobs.db_url) if knobs.db_url else knobs.home / "kgen.db"
    if local is None:
        return None
    files.append(local)
    if knobs.team_db_url:
        team = _sqlite_file(knobs.team_db_url)
        if team is None:
            return None
        files.append(team)
    out = []
    for path in files:
        out.append(_stat(path))
        wal = _stat(path.with_name(path.name + "-wal"))
        out.append(wal if wal[2] else [wal[0], None, None])   # an empty WAL is no WAL
    if knobs.use_shipped_db:
        from kgen.render import data_root

        out.extend(sorted(_shipped_stats(str(data_root() / "tuning_db"))))
    return out


def _shipped_stats(folder: str) -> list[list]:
    """[path, mtime, size] of every ``*.jsonl`` under ``folder`` (its subfolders too, as the shipped
    store reads them), from directory scans: a dispatch miss takes the fingerprint twice, and
    pathlib's recursive glob with a stat a file cost a few hundred microseconds."""
    out, todo = [], [folder]
    while todo:
        try:
            entries = list(os.scandir(todo.pop()))
        except OSError:
            continue
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):      # as the store's recursive glob: no linked folders
                todo.append(entry.path)
            elif entry.name.endswith(".jsonl"):
                try:
                    st = entry.stat()
                except OSError:
                    out.append([entry.path, None, None])
                    continue
                out.append([entry.path, st.st_mtime_ns, st.st_size])
    return out


def memo_key(family: str, problem_key: str, device: int, digest: str) -> str:
    return "|".join([family, digest, str(device), knobs.dispatch_policy, str(int(knobs.verified_only)),
                     knobs.arch, f"vendor={int(knobs.vendor)}", problem_key])


def _read() -> dict:
    try:
        data = json.loads(memo_path().read_text())
    except (OSError, ValueError):
        return {}
    return data.get("entries", {}) if isinstance(data, dict) and data.get("version") == MEMO_VERSION else {}


def lookup(key: str, fingerprint: list | None) -> dict | None:
    """The remembered entry, if the database files and the cubin are as they were."""
    if fingerprint is None or not knobs.dispatch_memo:
        return None
    entry = _read().get(key)
    if not isinstance(entry, dict) or entry.get("fingerprint") != fingerprint:
        return None
    if not os.path.isfile(entry.get("cubin", "")):
        return None
    return entry


def remember(key: str, fingerprint: list | None, entry: dict) -> None:
    """Store ``entry`` (config, cubin path, target...) under ``key``; never raises."""
    if fingerprint is None or not knobs.dispatch_memo or not entry.get("cubin"):
        return
    path = memo_path()
    try:
        entries = _read()
        entries[key] = {**entry, "fingerprint": fingerprint}
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".dispatch-memo.", suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump({"version": MEMO_VERSION, "entries": entries}, f, sort_keys=True)
        os.replace(tmp, path)
    except OSError as exc:   # a read-only cache only costs the next process its shortcut
        log.debug("could not write the dispatch memo %s: %s", path, exc)
