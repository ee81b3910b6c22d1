"""BERT and the families that kept its layer: RoBERTa, XLM-RoBERTa and ELECTRA (MiniLM is BERT)."""

from __future__ import annotations

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
