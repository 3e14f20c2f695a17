"""Hash files in a worker thread, and remember digests of unchanged files.

The cache maps (path, size, mtime_ns, ctime_ns, inode, device) to a digest, in a small SQLite
file, so that pushing unchanged data again neither re-reads nor re-sends it. The ctime is
there because no user can set it: a file rewritten with other bytes of the same size and
its mtime put back (``touch -r``, ``cp -p``, a restore) still shows as changed, as git's
index sees it. A file modified in the second before it was hashed is not cached: timestamps
are coarse, and a write in the same tick with the same size would otherwise be mistaken for
unchanged data.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
import time
from pathlib import Path

import anyio.to_thread

READ_CHUNK = 1024 * 1024
_RACY_WINDOW_NS = 1_000_000_000


def hash_file(path: Path) -> tuple[str, int]:
    """Return the sha256 digest and size of a file, reading it in chunks (blocking)."""
    hasher = hashlib.sha256()
    size = 0
    with path.open("rb") as f:
        while chunk := f.read(READ_CHUNK):
            hasher.update(chunk)
            size += len(chunk)
    return "sha256:" + hasher.hexdigest(), size


def stat_key(path: Path, st: os.stat_result) -> str:
    """Return the cache key of a file: its real path and the stat fields that show a change."""
    return (
        f"{os.path.realpath(path)}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}"
        f"\0{st.st_ino}\0{st.st_dev}"
    )


def settled(st: os.stat_result, started_ns: int) -> bool:
    """Return True when the file was last modified well before hashing started. (Its ctime
    is in the key instead: a restored mtime is the user's doing, a same-tick ctime is not.)"""
    return st.st_mtime_ns < started_ns - _RACY_WINDOW_NS


def default_cache_path() -> Path:
    """Return where the digest cache lives: $K8SJOBS_CACHE_DIR or the XDG cache dir."""
    base = os.environ.get("K8SJOBS_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "k8sjobs"
    )
    return Path(base) / "digests.sqlite"


class DigestCache:
    """A persistent map from a file's identity to its digest; every method is thread-safe.

    Values are free-form strings so that directories can cache their archive's digests too.
    A cache that cannot be opened (read-only home, say) silently behaves as empty: it only
    saves time, it is never needed for correctness.
    """

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or default_cache_path()
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        self._broken = False

    def _connect(self) -> sqlite3.Connection | None:
        if self._db is None and not self._broken:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                db = sqlite3.connect(self.path, timeout=5, check_same_thread=False)
                db.execute("CREATE TABLE IF NOT EXISTS digests (key TEXT PRIMARY KEY, value TEXT)")
                db.commit()
                self._db = db
            except (OSError, sqlite3.Error):
                self._broken = True
        return self._db

    def get(self, key: str) -> str | None:
        """Return the cached value for ``key``, or None."""
        with self._lock:
            db = self._connect()
            if db is None:
                return None
            try:
                row = db.execute("SELECT value FROM digests WHERE key = ?", (key,)).fetchone()
            except sqlite3.Error:
                return None
            return None if row is None else str(row[0])

    def put(self, key: str, value: str) -> None:
        """Remember ``value`` for ``key``."""
        with self._lock:
            db = self._connect()
            if db is None:
                return
            try:
                db.execute("INSERT OR REPLACE INTO digests VALUES (?, ?)", (key, value))
                db.commit()
            except sqlite3.Error:
                pass

    def close(self) -> None:
        """Close the database connection."""
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    async def file_digest(self, path: Path) -> tuple[str, int]:
        """Return a file's digest and size, from the cache when the file is unchanged."""
        return await anyio.to_thread.run_sync(self._file_digest_blocking, path)

    def lookup_file(self, path: Path) -> tuple[str, int] | None:
        """Return a file's cached digest and size if it is unchanged since cached (blocking)."""
        st = path.stat()
        cached = self.get(stat_key(path, st))
        return (cached, st.st_size) if cached else None

    def remember_file(self, path: Path, st: os.stat_result, digest: str, started_ns: int) -> None:
        """Cache a digest computed from ``path`` if the file did not change meanwhile."""
        now = path.stat()
        if settled(st, started_ns) and stat_key(path, now) == stat_key(path, st):
            self.put(stat_key(path, st), digest)

    def _file_digest_blocking(self, path: Path) -> tuple[str, int]:
        started = time.time_ns()
        st = path.stat()
        cached = self.get(stat_key(path, st))
        if cached:
            return cached, st.st_size
        digest, size = hash_file(path)
        self.remember_file(path, st, digest, started)
        return digest, size
