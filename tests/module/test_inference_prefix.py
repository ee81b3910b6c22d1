"""``predict`` of several tasks on one input runs the layers below the tasks' modules once per distinct row
(single sentences, a cross pair's sequence, each side of a siamese pair) and answers as each item alone does;
``shared_prefix=False`` runs every row through every layer."""

from __future__ import annotations

import numpy as np
import torch

from pal_lightning import MultiTaskModule, TaskSpec
from pal_lightning.module.inference import predict_items
from pal_lightning.testing import TINY_BERT
from pal_lightning.testing.conformance import move

TOPIC = TaskSpec(name="topic", num_labels=3, text_columns=("sentence",))
TEXT = "a fine film with a long and dull end"
PAIR = ("how do I cook rice?", "how is rice cooked?")
ITEMS = [
    ("sst", TEXT),
    ("topic", TEXT),
    ("cfimdb", TEXT),
    ("qqp", PAIR),  # cross: one sequence
    ("sts", PAIR),  # siamese: a row per side
    ("sst", PAIR[0]),  # the same row as the siamese pair's first side
]


def test_all_tasks_on_one_input_equal_each_alone_and_run_the_lower_layer_once() -> None:
    torch.manual_seed(0)
    module = MultiTaskModule(
        tasks=["sst", "qqp", "sts", "cfimdb", TOPIC],
        encoder_config=TINY_BERT,
        adapter={"method": "pals", "size": 8, "num_heads": 2, "num_layers": 1, "placement": "top"},
        pair_encoding={"sts": "siamese", "default": "cross"},
    )
    move(module)  # zero-initialised ups would make every task's modules the identity
    module.set_label_names({"topic": ["sports", "politics", "arts"]})
    rows: list[list[int]] = [[], []]
    for i, layer in enumerate(module.encoder.family.layer_list(module.encoder.backbone)):
        layer.register_forward_pre_hook(lambda m, args, i=i: rows[i].append(args[0].shape[0]))
    together = module.predict(ITEMS)
    # 7 rows (the siamese second side one more) of 4 distinct inputs: layer 0, and layer 1 but for its join
    # norm (the PALs' term joins there), run on the 4
    assert rows == [[4], [4]]
    for item, prediction in zip(ITEMS, together, strict=True):
        (alone,) = module.predict([item])
        assert prediction.task == alone.task and prediction.label == alone.label
        if alone.score is not None:
            assert abs(prediction.score - alone.score) < 1e-5
        else:
            np.testing.assert_allclose(prediction.probabilities, alone.probabilities, atol=1e-5, rtol=0)
    assert module.encoder._prefix_once is False
    rows[:] = [[], []]
    plain = predict_items(module, ITEMS, shared_prefix=False)
    assert rows == [[7], [7]]
    for a, b in zip(together, plain, strict=True):
        assert a.label == b.label
