"""The families whose layers are not BERT's: DistilBERT, MPNet, DeBERTa-v2/v3 and ModernBERT (pre-LN, a
fused ``Wqkv`` and a gated FFN whose ``ffn_input`` site is the input half)."""

from __future__ import annotations

from pal_lightning.modeling.families.base import EncoderFamily, whole_linears
from pal_lightning.modeling.families.bert_like import BERT_FFN

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
