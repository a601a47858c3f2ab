"""One rule for records that share a key, the same in import, merge and commit.

A record's key is (family, problem_key, device, template_digest, config_name, created)
(``kgen.db.base.KEY_COLUMNS``). When a record comes whose key is already held (stored in the
database, read earlier from the same file or the other files of a merge, or earlier in the
same commit):

- **identical** (the same canonical text, ``provenance.origin`` aside): it is the same
  measurement, held once. The one already held stays, with its origin, except that an import
  made with ``--trust`` (origin ``trusted:<file>``) of a record held as an import without it
  (``import:<file>``) makes the held one trusted (it takes the new origin), so importing a
  file again with ``--trust`` does what it says; it is counted as a duplicate ("already
  stored") and, so changed, as trusted now.
- **different** (another time, or any other field): both are kept, as two measurements of
  the same config, and it is counted as a conflict ("N conflicting records kept"). Dispatch
  takes the fastest it may use of them: under ``KGEN_VERIFIED_ONLY`` (the default) an
  imported record only once ``kgen db verify`` found its time on this device
  (``kgen.db.trust``), so of two conflicting imported times the verified one wins.

Nothing is dropped silently: import and merge summaries say how many records were duplicates
and how many conflicts were kept. ``Held.admit`` is the rule; ``MemoryStore.commit``,
``SqlStore.commit`` / ``add_rows``, ``import_file``, ``import_records`` and ``merge`` all go
through it.

>>> held = Held()
>>> held.admit([(("k",), '{"t": 1}', "a"), (("k",), '{"t": 1}', "b"), (("k",), '{"t": 2}', "c")])
['a', 'c']
>>> held.tally
Tally(written=2, duplicates=1, conflicts=1, trusted=0)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from kgen.db.codec import loads


def _without_origin(text: str) -> Any:
    d = loads(text.encode())
    provenance = d.get("provenance") if isinstance(d, dict) else None
    if isinstance(provenance, dict):
        provenance.pop("origin", None)
    return d


def same(a: str, b: str) -> bool:
    """Whether two canonical record texts hold the same measurement (``provenance.origin`` aside)."""
    return a == b or _without_origin(a) == _without_origin(b)


def _origin(text: str) -> str:
    d = loads(text.encode())
    return str(d.get("provenance", {}).get("origin", "")) if isinstance(d, dict) else ""


def trusts_more(held: str, coming: str) -> bool:
    """Whether ``coming``, identical to ``held`` origin aside, is a --trust import of a record
    held as an import without it (kgen.db.trust's origins)."""
    return held != coming and _origin(held).startswith("import:") and _origin(coming).startswith("trusted:")


@dataclass
class Tally:
    written: int = 0         # records kept: new keys, and conflicts
    duplicates: int = 0      # identical to a record held: not kept again
    conflicts: int = 0       # a key held with other content: kept beside it (counted in written too)
    trusted: int = 0         # duplicates that made a held import trusted (counted in duplicates too)


class Held:
    """What is held under each key: the rule's memory over one import, merge or commit.

    ``texts`` maps a key to the texts held under it (a store passes its own index, which
    ``admit`` then keeps up to date). ``stored`` names keys held by a database whose texts are
    not loaded yet; ``fetch(keys)`` returns their texts, once, when a record with one of those
    keys comes.
    """

    def __init__(self, texts: dict[tuple, list[str]] | None = None, stored: Iterable[tuple] = (),
                 fetch: Callable[[list[tuple]], Mapping[tuple, list[str]]] | None = None):
        self.texts = {} if texts is None else texts
        self._stored = set(stored)
        self._fetch = fetch
        self.tally = Tally()
        self.upgrades: list[tuple[tuple, str, str, Any]] = []   # (key, held text, new text, item)

    def hold(self, keys: Iterable[tuple]) -> None:
        """Keys a database holds, whose texts ``fetch`` gives when a record with one comes."""
        self._stored.update(k for k in keys if k not in self.texts)

    def admit(self, batch: Iterable[tuple[tuple, str, Any]]) -> list:
        """The items of ``(key, text, item)`` to keep, in order, under the rule; a held text a
        --trust import replaces goes to ``upgrades`` (the store rewrites that record)."""
        batch = list(batch)
        if self._stored:
            wanted = sorted({key for key, _, _ in batch if key in self._stored})
            if wanted:
                self._stored.difference_update(wanted)
                for key, texts in self._fetch(wanted).items():
                    self.texts.setdefault(key, []).extend(texts)
        kept = []
        tally, texts_of = self.tally, self.texts
        for key, text, item in batch:
            held = texts_of.get(key)
            if held is None:
                texts_of[key] = [text]
            elif (i := next((i for i, h in enumerate(held) if same(h, text)), None)) is not None:
                tally.duplicates += 1
                if trusts_more(held[i], text):
                    self.upgrades.append((key, held[i], text, item))
                    held[i] = text
                    tally.trusted += 1
                continue
            else:
                held.append(text)
                tally.conflicts += 1
            tally.written += 1
            kept.append(item)
        return kept
