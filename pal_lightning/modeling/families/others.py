"""The families whose layers are not BERT's: DistilBERT, MPNet, DeBERTa-v2/v3 and ModernBERT (pre-LN, a
fused ``Wqkv`` and a gated FFN whose ``ffn_input`` site is the input half)."""

from __future__ import annotations

from pal_lightning.modeling.families.base import EncoderFamily

DISTILBERT = EncoderFamily(
    name="distilbert",
    model_types=("distilbert",),
    layers="transformer.layer",
    layer_class="transformers.models.distilbert.modeling_distilbert:TransformerBlock",
    join_norm="output_layer_norm",
    sites={
        "query": ("attention.q_lin", None),
        "key": ("attention.k_lin", None),
        "value": ("attention.v_lin", None),
        "attention_output": ("attention.out_lin", None),
        "ffn_input": ("ffn.lin1", None),
        "ffn_output": ("ffn.lin2", None),
    },
    token_types=False,
    layer_index_keyword=None,
)

MPNET = EncoderFamily(
    name="mpnet",
    model_types=("mpnet",),
    layers="encoder.layer",
    layer_class="transformers.models.mpnet.modeling_mpnet:MPNetLayer",
    join_norm="output.LayerNorm",
    sites={
        "query": ("attention.attn.q", None),
        "key": ("attention.attn.k", None),
        "value": ("attention.attn.v", None),
        "attention_output": ("attention.attn.o", None),
        "ffn_input": ("intermediate.dense", None),
        "ffn_output": ("output.dense", None),
    },
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
    sites={
        "query": ("attention.self.query_proj", None),
        "key": ("attention.self.key_proj", None),
        "value": ("attention.self.value_proj", None),
        "attention_output": ("attention.output.dense", None),
        "ffn_input": ("intermediate.dense", None),
        "ffn_output": ("output.dense", None),
    },
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
