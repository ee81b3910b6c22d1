"""``pal_lightning.pipeline(folder, task="sst")("a fine film")``: a saved model's predictions shaped as a
``transformers`` text-classification pipeline's (``[{'label': 'positive', 'score': 0.61}]``), through the
inference core (:func:`~pal_lightning.module.inference.predict_items`); nothing heavy is imported until called.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pal_lightning.core.errors import PalUserError

if TYPE_CHECKING:
    import torch

    from pal_lightning.module.inference import Prediction
    from pal_lightning.module.multitask import MultiTaskModule

__all__ = ["TaskPipeline", "pipeline"]


def torch_device(device: Any) -> torch.device:
    """A ``torch.device`` from ``None`` (the CPU), a name, a ``torch.device``, or an int as transformers
    takes it (``-1``: the CPU, ``0``: the first GPU).

    Raises:
        PalUserError: for a device name torch does not know.
    """
    import torch

    if device is None or (isinstance(device, int) and device < 0):
        return torch.device("cpu")
    try:
        target = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
    except (RuntimeError, TypeError):
        raise PalUserError(
            f"Unknown device {device!r}. Use 'cpu', 'cuda', 'cuda:0', a torch.device or an int."
        ) from None
    return target


def load_model(
    model: str | None, ckpt: str | None, model_class: str | type[MultiTaskModule] | None = None
) -> MultiTaskModule:
    """The module from a ``save_pretrained`` folder / hub id, or from a checkpoint (on the CPU), as
    ``model_class`` (a ``MultiTaskModule`` subclass or its dotted name, imported here) when the user names
    one; a file saved from a subclass needs it named (:mod:`pal_lightning.module.saved_class`).

    Raises:
        PalUserError: when neither or both are given, or the source cannot be loaded.
    """
    from pal_lightning.core.checkpoint_io import AtomicCheckpointIO
    from pal_lightning.module.multitask import MultiTaskModule
    from pal_lightning.module.saved_class import module_from_checkpoint

    if bool(model) == bool(ckpt):
        raise PalUserError(
            "Give the model with exactly one of --predict.model <folder written by fit, e.g. "
            "runs/<name>/version_N/model, or a hub id> and --ckpt_path <file.ckpt>."
        )
    if model:
        return MultiTaskModule.from_pretrained(model, model_class=model_class)
    path = Path(str(ckpt))
    if not path.is_file():
        raise PalUserError(f"Checkpoint {path} does not exist. Pass the path of a .ckpt file to --ckpt_path.")
    # one-line errors for a file that is no checkpoint, truncated, or refused by weights_only loading
    checkpoint = AtomicCheckpointIO().load_checkpoint(path, map_location="cpu", weights_only=True)
    # built here, not by Lightning's load_from_checkpoint: the user, not the file, names a subclass
    module = module_from_checkpoint(MultiTaskModule, checkpoint, str(path), model_class)
    max_length = (checkpoint.get("datamodule_hyper_parameters") or {}).get("max_length")
    if max_length:
        module.predict_max_length = int(max_length)
    return module


def _as_pair(item: Any) -> Any:
    # transformers' {"text": a, "text_pair": b} as the pair (a, b), and {"text": a} as the sentence a
    if isinstance(item, Mapping):
        if set(item) == {"text", "text_pair"}:
            return (item["text"], item["text_pair"])
        if set(item) == {"text"}:
            return item["text"]
        raise PalUserError(
            f"An input mapping must have the keys text (and text_pair for a pair), got {sorted(item)}."
        )
    return item


class TaskPipeline:
    """Predictions of one task of a loaded model: ``pipe(inputs, top_k=1)``; built by :func:`pipeline`.

    Args:
        model: the module (in eval mode, on its device).
        task: the task to predict; ``None`` for a model of one task.
        batch_size: inputs per forward pass.
    """

    def __init__(self, model: MultiTaskModule, task: str | None, batch_size: int = 64) -> None:
        if task is None and len(model.task_specs) != 1:
            raise PalUserError(
                f"This model has several tasks ({', '.join(model.task_specs)}): name one, e.g. "
                f"pipeline(..., task={next(iter(model.task_specs))!r})."
            )
        if task is not None:
            model.predict_spec(task)  # one line naming the model's tasks
        self.model, self.batch_size = model, batch_size
        self.task = task if task is not None else next(iter(model.task_specs))

    @property
    def device(self) -> torch.device:
        """Where the model runs."""
        return self.model.device

    def __repr__(self) -> str:
        return f"TaskPipeline(task={self.task!r}, device={str(self.device)!r})"

    def __call__(self, inputs: Any, top_k: int | None = 1) -> list[Any]:
        """Predict ``inputs``: a sentence, a ``(sentence1, sentence2)`` pair, or a list of either.

        Returns:
            Per input, in input order: ``{"label", "score"}`` (``top_k=1``), a list of the ``top_k`` best
            such dicts (``None``: every class), or ``{"score"}`` for a regression task; for one input (not a
            list) and ``top_k`` other than 1, that input's list itself.

        Raises:
            PalUserError: for inputs of the wrong shape for the task, no input, or ``top_k`` below 1.
        """
        from pal_lightning.module.inference import predict_items

        if top_k is not None and top_k < 1:
            raise PalUserError(f"top_k must be >= 1 (or None for every class), got {top_k}.")
        inputs = _as_pair(inputs)
        single = isinstance(inputs, (str, tuple))
        if not single and not isinstance(inputs, Iterable):
            raise PalUserError(
                f"Cannot predict a {type(inputs).__name__}: pass a sentence, a (sentence1, sentence2) pair "
                "or a list of them."
            )
        items = [(self.task, x) for x in ([inputs] if single else map(_as_pair, inputs))]
        if not items:
            raise PalUserError(
                "Nothing to predict: pass a sentence, a (sentence1, sentence2) pair or a list of them."
            )
        out = [entry(p, top_k) for p in predict_items(self.model, items, self.batch_size)]
        return out[0] if single and top_k != 1 and isinstance(out[0], list) else out  # as transformers


def entry(prediction: Prediction, top_k: int | None) -> Any:
    """The pipeline's output for one :class:`~pal_lightning.module.inference.Prediction`."""
    if prediction.probabilities is None:
        return {"score": prediction.score}
    row, names = prediction.probabilities, prediction.label_names
    best = sorted(range(len(row)), key=lambda c: -float(row[c]))[:top_k]
    ranked = [{"label": names[c] if names else c, "score": float(row[c])} for c in best]
    return ranked[0] if top_k == 1 else ranked


def pipeline(
    model: str | os.PathLike[str] | MultiTaskModule,
    task: str | None = None,
    device: Any = None,
    batch_size: int = 64,
    model_class: str | type[MultiTaskModule] | None = None,
) -> TaskPipeline:
    """A :class:`TaskPipeline` predicting ``task`` with ``model``.

    Args:
        model: a folder written by ``save_pretrained`` (or by ``fit``: ``runs/<name>/version_N/model``), a
            hub id, a ``.ckpt`` file, or a ``MultiTaskModule``.
        task: the task to predict; ``None`` for a model of one task.
        device: ``"cpu"``, ``"cuda:1"``, a ``torch.device``, or an int as transformers takes it; ``None``: the
            CPU for a model loaded here, where it is for a module given.
        batch_size: inputs per forward pass.
        model_class: the class of a model saved from a subclass of ``MultiTaskModule``: the class, or its
            dotted name (``"my_pkg.models.MyModule"``, imported here); the saved file only names it.

    Raises:
        PalUserError: for a model that cannot be loaded, an unknown task, an unknown or absent device, or a
            ``batch_size`` below 1.
    """
    from pal_lightning.module.multitask import MultiTaskModule

    if batch_size < 1:
        raise PalUserError(f"batch_size must be >= 1, got {batch_size}.")
    target = None if device is None else torch_device(device)
    if target is not None and target.type == "cuda":
        import torch

        if (target.index or 0) >= torch.cuda.device_count():
            raise PalUserError(
                f"Device {device!r} is not available: this machine has {torch.cuda.device_count()} CUDA "
                "device(s). Use device='cpu' (or -1), or the index of a GPU it has."
            )
    elif target is not None and target.type != "cpu":
        import torch

        try:  # mps, xpu, ...: torch refuses an empty tensor on a device this machine (or build) lacks
            torch.empty(0, device=target)
        except RuntimeError:
            raise PalUserError(
                f"Device {device!r} is not available on this machine. Use device='cpu' (or -1), or a device "
                "it has."
            ) from None
    if isinstance(model, (str, os.PathLike)):
        ckpt = Path(model).suffix == ".ckpt"
        source = str(model)
        model = load_model(None, source, model_class) if ckpt else load_model(source, None, model_class)
    elif not isinstance(model, MultiTaskModule):
        raise PalUserError(
            f"pipeline takes a saved model (a folder written by save_pretrained or fit, a hub id, a .ckpt file) "
            f"or a MultiTaskModule, not {type(model).__name__}."
        )
    return TaskPipeline((model if target is None else model.to(target)).eval(), task, batch_size)
