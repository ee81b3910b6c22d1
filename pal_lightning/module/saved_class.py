"""Which class rebuilds a saved model: a folder (``config.json``'s ``model_class``) or a checkpoint (the CLI's
``_class_path``) names the class it was saved from, but the file never chooses what is imported.

The class used is the one the user calls (``MyModule.from_pretrained``) when the file was saved from it or from
a class it extends; any other class must be named by the user, as a class or a dotted name they typed
(``model_class=`` in Python, ``--model.class_path`` on the command line), which is then imported. Otherwise
one :class:`PalUserError` line names the class the file needs and how to name it.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping
from typing import Any, TypeVar

from pal_lightning.core.errors import PalUserError
from pal_lightning.module.optim_config import with_optim_group

#: The command-line option that names the model's class (``fit``, ``predict`` of a config or of new sentences).
CLASS_OPTION = "--model.class_path"
#: The key of a checkpoint's ``hyper_parameters`` where LightningCLI records the class it instantiated.
CHECKPOINT_CLASS_KEY = "_class_path"

T = TypeVar("T")


def class_path(cls: type) -> str:
    """``module.QualName`` of ``cls``, as ``config.json`` records it."""
    return f"{cls.__module__}.{cls.__qualname__}"


def _already_imported(path: str) -> Any:
    # what the dotted ``path`` names among the modules imported so far: sys.modules is read, nothing imported
    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        found: Any = sys.modules.get(".".join(parts[:cut]))
        if found is not None:
            for name in parts[cut:]:
                found = getattr(found, name, None)
            return found
    return None


def fits_saved_class(recorded: str | None, cls: type) -> bool:
    """Whether ``cls`` may rebuild a model saved from the class named ``recorded`` without the user naming a
    class: it is that class or extends it (a file that names no class: any)."""
    if not recorded or recorded in {class_path(k) for k in cls.__mro__}:
        return True
    saved = _already_imported(recorded)  # another name of an imported class (a package's re-export)
    return isinstance(saved, type) and issubclass(cls, saved)


def model_class_named(name: str | type[T], base: type[T]) -> type[T]:
    """The class the user named: a class, or a dotted name (``my_pkg.models.MyModule``), imported here since
    the user typed it; a subclass of ``base``.

    Raises:
        PalUserError: for a name without a module, a module that is not found, a missing attribute, or
            something that is not a subclass of ``base``.
    """
    found: Any = name
    if isinstance(name, str):
        module_name, _, attribute = name.strip().rpartition(".")
        if not module_name or not attribute:
            raise PalUserError(
                f"Model class {name!r} is not a dotted name: give the module and the class, e.g. "
                "my_package.models.MyModule."
            )
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as err:
            raise PalUserError(
                f"Cannot import {module_name} for the model class {name}: {err}. Put the folder that holds it "
                "on PYTHONPATH (e.g. PYTHONPATH=. pal-lightning ...) or install its package."
            ) from None
        found = getattr(module, attribute, None)
        if found is None:
            raise PalUserError(f"Module {module_name} has no {attribute}: check the model class {name}.")
    if not (isinstance(found, type) and issubclass(found, base)):
        shown = name if isinstance(name, str) else getattr(name, "__qualname__", repr(name))
        raise PalUserError(f"The model class {shown} is not a subclass of {base.__qualname__}.")
    return found


def how_to_name(recorded: str, kind: str) -> str:
    """How a user names the class ``recorded`` in Python and on the command line (``kind``: ``"folder"`` or
    ``"checkpoint"``)."""
    short = recorded.rpartition(".")[2]
    load = "from_pretrained" if kind == "folder" else "load_from_checkpoint"
    return (
        f"in Python {short}.{load}(...) or pipeline(..., model_class={recorded!r}), on the command line "
        f"{CLASS_OPTION} {recorded} (its module importable: on PYTHONPATH or installed)"
    )


def loading_hint(cls: type) -> str:
    """How to load a model saved from ``cls``: for a class of the user's own, with its name."""
    hint = f"load it with {cls.__qualname__}.from_pretrained"
    if cls.__module__.partition(".")[0] == "pal_lightning":
        return hint
    return f"{hint}; pal-lightning predict needs {CLASS_OPTION} {class_path(cls)}"


def chosen_class(
    cls: type[T], model_class: str | type[T] | None, recorded: str | None, source: str, kind: str
) -> type[T]:
    """The class that rebuilds the model saved in ``source`` (from the class named ``recorded``): the one the
    user named in ``model_class``, else ``cls`` when :func:`fits_saved_class`.

    Raises:
        PalUserError: naming the class the file needs and how to name it, or a bad ``model_class``.
    """
    if model_class is not None:
        return model_class_named(model_class, cls)
    if fits_saved_class(recorded, cls):
        return cls
    raise PalUserError(
        f"{source} was saved from {recorded}, not {cls.__qualname__}; a saved file does not choose what is "
        f"imported, so name that class to load it: {how_to_name(str(recorded), kind)}."
    )


def built(cls: type[T], settings: Mapping[str, Any], recorded: str | None, source: str, kind: str) -> T:
    """``cls(**settings)``; settings ``cls`` does not take become one line naming the saved class."""
    try:
        return cls(**settings)
    except TypeError as err:
        hint = (
            how_to_name(recorded, kind)
            if recorded
            else f"model_class= in Python, {CLASS_OPTION} on the command line"
        )
        raise PalUserError(
            f"{source} was saved from {recorded or 'another class'}; {cls.__qualname__} cannot be built from "
            f"its settings ({err}). Name the class it was saved from: {hint}."
        ) from err


def checked_weights(result: Any, source: str) -> None:
    """Refuse weights (``load_state_dict(strict=False)``'s ``result``) that do not fit the model built."""
    if result.missing_keys or result.unexpected_keys:
        raise PalUserError(
            f"The weights of {source} do not match the model its settings describe: missing "
            f"{result.missing_keys[:5]}, unexpected {result.unexpected_keys[:5]}. Save it again, or name the "
            "class it was saved from."
        )


def module_from_checkpoint(
    base: type[T], checkpoint: Mapping[str, Any], source: str, model_class: str | type[T] | None = None
) -> T:
    """The model of a checkpoint written by ``fit`` (loaded with ``weights_only``), rebuilt from its
    hyper-parameters by :func:`chosen_class` (``base`` unless the user names a class), then its weights
    loaded and checked (``on_load_checkpoint``) as Lightning's ``load_from_checkpoint`` does.

    Raises:
        PalUserError: for a checkpoint without hyper-parameters, a class the user did not name, settings
            or weights the class does not fit.
    """
    hparams = checkpoint.get("hyper_parameters")
    if not isinstance(hparams, Mapping) or not isinstance(checkpoint.get("state_dict"), Mapping):
        raise PalUserError(
            f"{source} holds no model hyper-parameters or weights: give a checkpoint written by pal-lightning "
            "fit (runs/<name>/version_N/checkpoints/best.ckpt)."
        )
    recorded = hparams.get(CHECKPOINT_CLASS_KEY)
    recorded = recorded if isinstance(recorded, str) else None
    cls = chosen_class(base, model_class, recorded, source, "checkpoint")
    # a checkpoint saved before optim existed holds its options flat
    settings = with_optim_group({k: v for k, v in hparams.items() if not k.startswith("_")})
    module: Any = built(cls, settings, recorded, source, "checkpoint")
    module.configure_model()  # as Lightning does before the weights (a no-op unless overridden)
    # the class is the user's choice now: on_load_checkpoint checks the rest (tasks, encoder, adapters)
    module.on_load_checkpoint(
        {**checkpoint, "hyper_parameters": {**hparams, CHECKPOINT_CLASS_KEY: class_path(cls)}}
    )
    checked_weights(module.load_state_dict(checkpoint["state_dict"], strict=False), source)
    return module.to("cpu").eval()
