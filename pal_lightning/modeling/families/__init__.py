"""Encoder families: which ``transformers`` architectures the library wires, and where (one
:class:`~pal_lightning.modeling.families.base.EncoderFamily` each, one registry line below). BERT's layer is
kept by RoBERTa, XLM-RoBERTa and ELECTRA (MiniLM is BERT); the others are DistilBERT, MPNet, DeBERTa-v2/v3
and ModernBERT (pre-LN, a fused ``Wqkv`` and a gated FFN whose ``ffn_input`` site is the input half)."""

from __future__ import annotations

from typing import Any

from pal_lightning.core.errors import PalUserError
from pal_lightning.modeling.families.base import EncoderFamily, Site, whole_linears

#: BERT's feed-forward Linears (kept by MPNet and DeBERTa).
BERT_FFN = ("intermediate.dense", "output.dense")
#: The sites of a BERT-shaped layer.
BERT_SITES: dict[str, Site] = whole_linears(
    "attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense", *BERT_FFN
)


def _bert_shaped(name: str, model_types: tuple[str, ...], layer_class: str, pooler: bool) -> EncoderFamily:
    return EncoderFamily(
        name=name,
        model_types=model_types,
        layers="encoder.layer",
        layer_class=layer_class,
        join_norm="output.LayerNorm",
        sites=BERT_SITES,
        pooler_option=pooler,
    )


BERT = _bert_shaped("bert", ("bert",), "transformers.models.bert.modeling_bert:BertLayer", True)
ROBERTA = _bert_shaped(
    "roberta", ("roberta",), "transformers.models.roberta.modeling_roberta:RobertaLayer", True
)
XLM_ROBERTA = _bert_shaped(
    "xlm-roberta",
    ("xlm-roberta",),
    "transformers.models.xlm_roberta.modeling_xlm_roberta:XLMRobertaLayer",
    True,
)
ELECTRA = _bert_shaped(
    "electra", ("electra",), "transformers.models.electra.modeling_electra:ElectraLayer", False
)

DISTILBERT = EncoderFamily(
    name="distilbert",
    model_types=("distilbert",),
    layers="transformer.layer",
    layer_class="transformers.models.distilbert.modeling_distilbert:TransformerBlock",
    join_norm="output_layer_norm",
    sites=whole_linears(
        "attention.q_lin", "attention.k_lin", "attention.v_lin", "attention.out_lin", "ffn.lin1", "ffn.lin2"
    ),
    token_types=False,
    layer_index_keyword=None,
)

MPNET = EncoderFamily(
    name="mpnet",
    model_types=("mpnet",),
    layers="encoder.layer",
    layer_class="transformers.models.mpnet.modeling_mpnet:MPNetLayer",
    join_norm="output.LayerNorm",
    sites=whole_linears(
        "attention.attn.q", "attention.attn.k", "attention.attn.v", "attention.attn.o", *BERT_FFN
    ),
    token_types=False,
    pooler_option=True,
    layer_index_keyword=None,
)

DEBERTA_V2 = EncoderFamily(
    name="deberta-v2",
    model_types=("deberta-v2",),
    layers="encoder.layer",
    layer_class="transformers.models.deberta_v2.modeling_deberta_v2:DebertaV2Layer",
    join_norm="output.LayerNorm",
    sites=whole_linears(
        "attention.self.query_proj",
        "attention.self.key_proj",
        "attention.self.value_proj",
        "attention.output.dense",
        *BERT_FFN,
    ),
    layer_index_keyword=None,
    row_shared_sites=("query", "key"),  # the relative embeddings, with share_att_key (v3's setting)
)

MODERNBERT = EncoderFamily(
    name="modernbert",
    model_types=("modernbert",),
    layers="layers",
    layer_class="transformers.models.modernbert.modeling_modernbert:ModernBertEncoderLayer",
    join_norm=None,
    sites={
        "query": ("attn.Wqkv", (0, 3)),
        "key": ("attn.Wqkv", (1, 3)),
        "value": ("attn.Wqkv", (2, 3)),
        "attention_output": ("attn.Wo", None),
        "ffn_input": ("mlp.Wi", (0, 2)),  # the GLU's input half; the other half is its gate
        "ffn_output": ("mlp.Wo", None),
    },
    token_types=False,
)

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
