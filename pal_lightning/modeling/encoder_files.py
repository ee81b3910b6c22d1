"""Reading a pretrained encoder's config and weights from its folder."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import torch
from transformers import AutoConfig, BertConfig, PretrainedConfig

from pal_lightning.core.errors import PalUserError
from pal_lightning.modeling.families import family_of


def local_encoder_dir(resolved: str) -> str:
    """A local directory for ``resolved`` (a hub id is downloaded)."""
    if Path(resolved).is_dir():
        return resolved
    from huggingface_hub import snapshot_download

    return snapshot_download(resolved, allow_patterns=["*.json", "*.safetensors", "*.bin", "*.txt"])


def read_encoder_config(directory: str | os.PathLike[str], name_or_path: object) -> PretrainedConfig:
    """The ``transformers`` config in ``directory``. Raises ``PalUserError`` for an unreadable config or a
    ``model_type`` no family claims."""
    try:
        raw = json.loads((Path(directory) / "config.json").read_text())
    except (OSError, ValueError) as err:
        raise PalUserError(f"Cannot read the encoder config in {directory}: {err}") from err
    model_type = raw.get("model_type") or "bert"
    family_of(SimpleNamespace(model_type=model_type), name_or_path)  # refuses an unsupported family first
    try:
        if model_type == "bert":
            return BertConfig.from_pretrained(directory, local_files_only=True)
        return AutoConfig.from_pretrained(directory, local_files_only=True)
    except (OSError, ValueError) as err:
        raise PalUserError(f"Cannot read the encoder config in {directory}: {err}") from err


def read_encoder_weights(directory: Path) -> tuple[dict[str, torch.Tensor], str]:
    """The state dict in ``directory`` (safetensors, sharded or not, else pytorch_model.bin) and its source.
    Raises ``PalUserError`` when the folder holds none of these files."""
    from safetensors.torch import load_file

    single = directory / "model.safetensors"
    if single.is_file():
        return load_file(str(single)), str(single)
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        state: dict[str, torch.Tensor] = {}
        for shard in shards:
            state.update(load_file(str(directory / shard)))
        return state, str(index)
    legacy = directory / "pytorch_model.bin"
    if legacy.is_file():
        return torch.load(legacy, map_location="cpu", weights_only=True), str(legacy)
    raise PalUserError(
        f"No weights found in {directory}: expected model.safetensors, a sharded safetensors index, or "
        "pytorch_model.bin. Save the encoder with save_pretrained()."
    )
