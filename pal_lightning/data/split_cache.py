"""Every split read, validated and tokenised once: in memory for the run, on disk across runs (keyed by
everything that changes the tokens)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pal_lightning.core.distributed import is_main_process
from pal_lightning.core.errors import PalUserError
from pal_lightning.data.sources.readers import check_bad_rows, label_names_for, read_split
from pal_lightning.data.sources.registry import resolve_source, source_exists, split_fingerprint
from pal_lightning.data.tokenize import (
    TokenizedSplit,
    cache_key,
    cache_path,
    encode_split,
    load_cached,
    save_cached,
    tokenizer_fingerprint,
)
from pal_lightning.tasks.specs import TaskKind, TaskSpec

if TYPE_CHECKING:
    from pal_lightning.data.options import DataConfig

__all__ = ["SplitCache", "load_fast_tokenizer"]

log = logging.getLogger(__name__)

#: The TaskSpec fields that decide how a split is read, hence part of the cache key.
_SPEC_FIELDS: tuple[str, ...] = ("format", "kind", "num_labels", "label_range", "text_columns")
_SPEC_FIELDS += ("label_column", "id_column", "hf_path", "hf_name", "ptb_detokenize", "unquote")
_SPEC_FIELDS += ("delimiter", "quoting")


def load_fast_tokenizer(name: str, revision: str | None) -> Any:
    """The fast (Rust) tokenizer of encoder ``name``; a PalUserError when the encoder has no fast tokenizer."""
    from transformers import AutoTokenizer

    from pal_lightning.core.hub import resolve_encoder

    tok = AutoTokenizer.from_pretrained(resolve_encoder(name, revision))
    if not getattr(tok, "is_fast", False):
        raise PalUserError(
            f"The tokenizer of {name!r} has no fast (Rust) version; pal-lightning needs one. Save the encoder "
            "with a tokenizer.json, or pick another encoder."
        )
    return tok


class SplitCache:
    """Reads, validates and tokenises the splits of ``specs``, each once (``cache_dir=None``: in memory only),
    as the data options ``options`` say."""

    def __init__(
        self,
        specs: list[TaskSpec],
        data_dir: Path,
        cache_dir: Path | None,
        pair_encodings: dict[str, str],
        options: DataConfig,
        parents: dict[str, str] | None = None,
    ) -> None:
        self.specs = {s.name: s for s in specs}
        #: The task of each evaluation view, by the view's name: a view's labels use its task's class names.
        self.parents = dict(parents or {})
        self.data_dir, self.cache_dir = data_dir, cache_dir
        self.tokenizer_name, self.tokenizer_revision = str(options.tokenizer), options.tokenizer_revision
        self.max_length, self.pair_encodings = int(options.max_length), pair_encodings
        self.on_bad_row, self.detokenize = options.on_bad_row, options.detokenize
        self.max_bad_fraction = options.max_bad_rows_fraction
        self.limit_examples = options.limit_examples
        self._tokenizer: Any = None
        self._tokenizer_fp: str | None = None
        self._loaded: dict[tuple[str, str], TokenizedSplit] = {}
        self._bad_rows_reported: set[tuple[str, str]] = set()

    @property
    def tokenizer(self) -> Any:
        """The encoder's fast tokenizer (loaded on first use)."""
        if self._tokenizer is None:
            self._tokenizer = load_fast_tokenizer(self.tokenizer_name, self.tokenizer_revision)
        return self._tokenizer

    def exists(self, spec: TaskSpec, split: str) -> bool:
        """Whether ``split`` of ``spec`` is there."""
        return source_exists(spec, resolve_source(spec, split, self.data_dir), self.data_dir)

    def forget(self) -> None:
        """Drop the splits held in memory."""
        self._loaded.clear()

    def names_of(self, spec: TaskSpec) -> TaskSpec:
        """The task whose class names ``spec``'s labels use: an evaluation view's task (the head's classes),
        unless the view names its own; else ``spec``."""
        parent = self.parents.get(spec.name)
        return self.specs[parent] if parent in self.specs and not spec.label_names else spec

    def settings(self, spec: TaskSpec, split: str) -> dict[str, Any]:
        """Everything besides the source and the tokenizer that changes a split's tokens."""
        out: dict[str, Any] = {f: getattr(spec, f, None) for f in _SPEC_FIELDS}
        out["kind"] = TaskKind(spec.kind).value
        out.update(
            split=split,
            max_length=self.max_length,
            pair_encoding=self.pair_encodings[spec.name] if spec.is_pair else None,
            detokenize=self.detokenize,
            on_bad_row=self.on_bad_row,
            # given, or the train split's (so a changed train file re-reads dev too)
            label_names=list(label_names_for(self.names_of(spec), self.data_dir)),
        )
        return out

    def _cache_file(self, spec: TaskSpec, split: str) -> Path | None:
        if self.cache_dir is None:
            return None
        if self._tokenizer_fp is None:
            self._tokenizer_fp = tokenizer_fingerprint(self.tokenizer)
        key = cache_key(
            split_fingerprint(spec, split, self.data_dir), self._tokenizer_fp, self.settings(spec, split)
        )
        return cache_path(self.cache_dir, spec.name, split, key)

    def load(self, task: str, split: str, report: bool = True) -> TokenizedSplit:
        """Read, validate and tokenise one split (from the cache when possible), cut to ``limit_examples``;
        ``report=False`` leaves a cached split's bad-row warning to the command that first uses it."""
        if (task, split) in self._loaded:
            return self._loaded[(task, split)]
        path = self._cache_file(self.specs[task], split)
        data = load_cached(path) if path is not None else None
        cached = data is not None
        if data is None:
            data = self._read_and_encode(task, split, path)
        else:  # too many bad rows stop the run however the split is read; the warning comes once
            warn = report and (task, split) not in self._bad_rows_reported
            check_bad_rows(data.source, data.bad_rows, data.rows, task, split, self.max_bad_fraction, warn)
            if warn:
                self._bad_rows_reported.add((task, split))
        if is_main_process():
            note = " (tokenised, from cache)" if cached else ""
            counts = (len(data), data.skipped, data.rows, data.source, note)
            log.info("%s %s: %d rows loaded, %d skipped, of %d in %s%s", task, split, *counts)
        data = data.head(self.limit_examples)
        self._loaded[(task, split)] = data
        return data

    def _read_and_encode(self, task: str, split: str, path: Path | None) -> TokenizedSplit:
        options = (self.on_bad_row, self.detokenize, self.max_bad_fraction)
        spec = self.specs[task]
        raw = read_split(spec, split, self.data_dir, *options, names_of=self.names_of(spec))
        self._bad_rows_reported.add((task, split))  # read_split warned about its bad rows
        data = encode_split(raw, self.tokenizer, self.max_length, self.pair_encodings[task])
        if path is not None:
            try:
                save_cached(path, data)
            except OSError as err:  # a read-only cache folder slows runs down but is not fatal
                log.warning("Could not write the tokenisation cache %s (%s).", path, err)
        return data
