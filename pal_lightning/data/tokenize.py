"""Tokenisation with the encoder's fast tokenizer (one batched call per split), stored ragged (a flat
``int32`` array plus ``offsets``) and padded per batch; pairs ``cross`` (one sequence) or ``siamese`` (keys
``*_a``/``*_b``). The on-disk cache: one ``.npz`` per split, named by a SHA-256 of all that decides it."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pal_lightning.core.batch import ATTENTION_MASK, INPUT_IDS, TOKEN_TYPE_IDS
from pal_lightning.core.files import atomic_write
from pal_lightning.data.sources.readers import RawSplit

log = logging.getLogger(__name__)

#: Bump when the cached layout or the reading/cleaning rules change.
CACHE_VERSION = 4


@dataclass
class Encoded:
    """Ragged token ids (and token types) of one sequence per example."""

    input_ids: np.ndarray
    """All token ids, concatenated (int32)."""
    token_type_ids: np.ndarray
    """int8, aligned with ``input_ids``."""
    offsets: np.ndarray
    """int64 ``[n + 1]``: example ``i`` is ``input_ids[offsets[i]:offsets[i + 1]]``."""

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def select(self, n: int) -> Encoded:
        """The first ``n`` examples."""
        end = int(self.offsets[n])
        return Encoded(self.input_ids[:end], self.token_type_ids[:end], self.offsets[: n + 1])


@dataclass
class TokenizedSplit:
    """One split of one task, tokenised: what the datasets and samplers work on."""

    task: str
    split: str
    ids: np.ndarray
    labels: np.ndarray | None
    """int64 classes or float64 scores; ``None`` when unlabelled."""
    encodings: dict[str, Encoded]
    """``""`` for single sentences and cross pairs; ``"a"`` and ``"b"`` for siamese pairs."""
    rows: int = 0
    """Data rows in the source (loaded + skipped)."""
    bad_rows: list[tuple[int, str]] = field(default_factory=list)
    source: str = ""
    truncated: np.ndarray | None = None
    """bool ``[n]``: whether an example's tokens were cut at ``max_length`` (either side of a siamese pair);
    ``None`` where not known (a split read from the cache)."""

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def skipped(self) -> int:
        return len(self.bad_rows)

    @property
    def lengths(self) -> np.ndarray:
        """Total tokens per example (both sides for siamese pairs)."""
        return np.sum([enc.lengths for enc in self.encodings.values()], axis=0)

    @property
    def widths(self) -> np.ndarray:
        """Tokens of each example's longest sequence (a siamese pair's longer side)."""
        return np.maximum.reduce([enc.lengths for enc in self.encodings.values()])

    def head(self, n: int | None) -> TokenizedSplit:
        """The first ``n`` examples (all when ``n`` is ``None`` or larger than the split)."""
        if n is None or n >= len(self):
            return self
        return dataclasses.replace(
            self,
            ids=self.ids[:n],
            labels=None if self.labels is None else self.labels[:n],
            encodings={k: v.select(n) for k, v in self.encodings.items()},
        )


def _ragged(seqs: list[list[int]], types: list[list[int]] | None) -> Encoded:
    lengths = np.fromiter((len(s) for s in seqs), dtype=np.int64, count=len(seqs))
    offsets = np.zeros(len(seqs) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    flat = np.fromiter((t for s in seqs for t in s), dtype=np.int32, count=int(offsets[-1]))
    if types is None:
        flat_types = np.zeros(len(flat), dtype=np.int8)
    else:
        flat_types = np.fromiter((t for s in types for t in s), dtype=np.int8, count=int(offsets[-1]))
    return Encoded(flat, flat_types, offsets)


def encode_split(
    raw: RawSplit, tokenizer: Any, max_length: int, pair_encoding: str = "cross"
) -> TokenizedSplit:
    """Tokenise a validated split with a fast tokenizer, one batched call per side, truncating to
    ``max_length`` (cross pairs: the longer sentence first)."""
    kwargs = dict(
        truncation=True, max_length=max_length, return_attention_mask=False, return_token_type_ids=True
    )
    encodings: dict[str, Encoded] = {}
    cut: np.ndarray | None = np.zeros(len(raw.ids), dtype=bool)
    if len(raw.texts) == 1 or pair_encoding == "cross":
        calls = {"": list(raw.texts)}  # one call: a sentence, or a pair as one sequence
    else:
        calls = {side: [texts] for side, texts in zip("ab", raw.texts, strict=True)}  # each side alone
    for side, args in calls.items():
        if not raw.ids:  # no rows (a header-only test file): a fast tokenizer fails on an empty batch
            encodings[side] = _ragged([], [])
            continue
        out = tokenizer(*args, **kwargs)
        encodings[side] = _ragged(out["input_ids"], out["token_type_ids"] if not side else None)
        # a fast tokenizer keeps what truncation removed as each encoding's overflow (a slow one: not known)
        rows = getattr(out, "encodings", None)
        overflow = None if rows is None else np.array([bool(e.overflowing) for e in rows], dtype=bool)
        cut = None if overflow is None or cut is None else cut | overflow
    ids = np.asarray(raw.ids, dtype=np.str_)
    return TokenizedSplit(
        raw.task, raw.split, ids, raw.labels, encodings, raw.rows, list(raw.bad_rows), raw.source, cut
    )


def pad_batch(
    enc: Encoded, index: np.ndarray, pad_id: int, suffix: str = "", multiple_of: int = 1
) -> dict[str, Any]:
    """The examples ``index`` of ``enc`` padded to the longest (rounded up to ``multiple_of``): LongTensor
    ``input_ids``/``attention_mask``/``token_type_ids`` with ``suffix`` (``_a``/``_b``) on the keys."""
    import torch

    starts = enc.offsets[index]
    lengths = enc.offsets[index + 1] - starts
    width = int(lengths.max()) if len(lengths) else 0
    width = -(-width // multiple_of) * multiple_of  # ceil to the multiple (masked positions: no effect)
    ids = np.full((len(index), width), pad_id, dtype=np.int64)
    types = np.zeros((len(index), width), dtype=np.int64)
    mask = (np.arange(width)[None, :] < lengths[:, None]).astype(np.int64)
    for row, (start, length) in enumerate(zip(starts.tolist(), lengths.tolist(), strict=True)):
        ids[row, :length] = enc.input_ids[start : start + length]
        types[row, :length] = enc.token_type_ids[start : start + length]
    return {
        f"{INPUT_IDS}{suffix}": torch.from_numpy(ids),
        f"{ATTENTION_MASK}{suffix}": torch.from_numpy(mask),
        f"{TOKEN_TYPE_IDS}{suffix}": torch.from_numpy(types),
    }


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """SHA-256 of a fast tokenizer's full serialised state (vocabulary, normaliser, special tokens)."""
    digest = hashlib.sha256(type(tokenizer).__name__.encode())
    digest.update(tokenizer.backend_tokenizer.to_str().encode())
    digest.update(json.dumps(tokenizer.all_special_tokens).encode())
    return digest.hexdigest()


def cache_key(source_fingerprint: str, tokenizer_fp: str, settings: dict[str, Any]) -> str:
    """The cache file name stem of one split."""
    payload = json.dumps(
        {"version": CACHE_VERSION, "source": source_fingerprint, "tokenizer": tokenizer_fp, **settings},
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:32]


def cache_path(cache_dir: Path, task: str, split: str, key: str) -> Path:
    """File of one cached split."""
    return cache_dir / "tokenized" / f"{task}-{split}-{key}.npz"


def save_cached(path: Path, data: TokenizedSplit) -> None:
    """Write ``data`` to ``path`` atomically (plain numpy arrays, no pickle)."""
    arrays: dict[str, np.ndarray] = {"ids": data.ids}
    if data.labels is not None:
        arrays["labels"] = data.labels
    for side, enc in data.encodings.items():
        arrays[f"input_ids{side}"] = enc.input_ids
        arrays[f"token_type_ids{side}"] = enc.token_type_ids
        arrays[f"offsets{side}"] = enc.offsets
    meta = {f: getattr(data, f) for f in ("task", "split", "rows", "bad_rows", "source")}
    meta["sides"] = list(data.encodings)
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    with atomic_write(path, "wb") as f:
        # numeric arrays only, never pickled (naming allow_pickle also keeps mypy from matching **arrays to it)
        np.savez(f, allow_pickle=False, **arrays)


def check_consistent(data: TokenizedSplit) -> None:
    """Raise ``ValueError`` unless the arrays of ``data`` fit together (a file that reads but was edited or
    written by another version would pair examples with the wrong tokens)."""
    n = len(data.ids)
    if data.labels is not None and len(data.labels) != n:
        raise ValueError(f"{len(data.labels)} labels for {n} examples")
    for side, enc in data.encodings.items():
        offsets = enc.offsets
        if offsets.ndim != 1 or len(offsets) != n + 1 or offsets[0] != 0:
            raise ValueError(f"offsets{side} do not start at 0 with one entry per example")
        if np.any(np.diff(offsets) < 0) or offsets[-1] != len(enc.input_ids):
            raise ValueError(f"offsets{side} decrease or do not end at the {len(enc.input_ids)} tokens")
        if len(enc.token_type_ids) != len(enc.input_ids):
            raise ValueError(f"token_type_ids{side} and input_ids{side} differ in length")


def load_cached(path: Path) -> TokenizedSplit | None:
    """Read a cached split, or ``None`` if absent, unreadable or inconsistent (then it is rebuilt)."""
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(z["meta"].tobytes().decode())
            encodings = {
                side: Encoded(z[f"input_ids{side}"], z[f"token_type_ids{side}"], z[f"offsets{side}"])
                for side in meta["sides"]
            }
            labels = z["labels"] if "labels" in z.files else None
            bad = [tuple(b) for b in meta["bad_rows"]]
            ids, source = z["ids"], meta.get("source", "")
            data = TokenizedSplit(
                meta["task"], meta["split"], ids, labels, encodings, int(meta["rows"]), bad, source
            )
        check_consistent(data)
        return data
    except Exception as err:  # noqa: BLE001 - a damaged cache file is rebuilt, never fatal
        log.warning("Ignoring unreadable cache file %s (%s); it will be rebuilt.", path, err)
        return None
