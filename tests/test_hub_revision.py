"""--model.encoder_revision: hub ids resolved through huggingface_hub's cache at a pinned revision."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from pal_lightning import MultiTaskModule, PalUserError
from pal_lightning.core.hub import DEFAULT_ENCODER, packaged_minilm_dir, resolve_encoder
from pal_lightning.testing import TINY_BERT

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


@pytest.fixture
def hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    import huggingface_hub.constants

    cache = fake_hub_cache(tmp_path / "hub")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
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
    module = MultiTaskModule(tasks=["sst"], encoder=REPO, encoder_revision="v1", adapter={"size": 8, "num_heads": 2})
    bert = module.encoder.bert.state_dict()
    assert all(torch.equal(bert[k], v) for k, v in expected.items() if k in bert)
    other = MultiTaskModule(tasks=["sst"], encoder=REPO, adapter={"size": 8, "num_heads": 2})  # main = SHA_B
    key = "embeddings.word_embeddings.weight"
    assert not torch.equal(other.encoder.bert.state_dict()[key], bert[key])
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
