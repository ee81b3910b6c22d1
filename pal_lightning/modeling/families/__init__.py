"""Encoder families: which ``transformers`` architectures the library wires, and where (one
:class:`~pal_lightning.modeling.families.base.EncoderFamily` each, one registry line below)."""

from __future__ import annotations

from typing import Any

from pal_lightning.core.errors import PalUserError
from pal_lightning.modeling.families.base import EncoderFamily, Site
from pal_lightning.modeling.families.bert_like import BERT, ELECTRA, ROBERTA, XLM_ROBERTA
from pal_lightning.modeling.families.others import DEBERTA_V2, DISTILBERT, MODERNBERT, MPNET

#: model_type -> family.
FAMILIES: dict[str, EncoderFamily] = {}


def register_family(family: EncoderFamily) -> EncoderFamily:
    """Add ``family`` under each of its ``model_types`` (replacing an earlier entry); returns it."""
    for model_type in family.model_types:
        FAMILIES[model_type] = family
    return family


for _family in (BERT, ROBERTA, XLM_ROBERTA, ELECTRA, DISTILBERT, MPNET, DEBERTA_V2, MODERNBERT):
    register_family(_family)


def supported_model_types() -> list[str]:
    """The ``model_type`` values a family claims, sorted."""
    return sorted(FAMILIES)


def family_of(config: Any, name_or_path: object = None) -> EncoderFamily:
    """The family of a ``transformers`` config (its ``model_type``). Raises ``PalUserError`` for a model type
    no family claims."""
    model_type = getattr(config, "model_type", None) or "bert"
    family = FAMILIES.get(model_type)
    if family is None:
        what = f"Encoder {name_or_path!r}" if name_or_path is not None else "The encoder"
        raise PalUserError(
            f"{what} is a {model_type!r} model, which pal-lightning does not wire. Supported model types: "
            f"{', '.join(supported_model_types())}. To add one, see docs/extending.md, 'Adding an encoder "
            "family'."
        )
    return family


__all__ = ["FAMILIES", "EncoderFamily", "Site", "family_of", "register_family", "supported_model_types"]
