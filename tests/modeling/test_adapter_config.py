"""AdapterConfig and the methods' own config classes: default sizes, validation, layer placement, mappings."""

from __future__ import annotations

import copy
import pickle

import pytest

from pal_lightning.core.errors import PalUserError
from pal_lightning.modeling import AdapterConfig
from pal_lightning.modeling.methods import BottleneckConfig, LoraConfig, config_class, option_names


@pytest.mark.parametrize(
    ("adapter", "placement", "hidden", "expected"),
    [
        ("pals", "all", 768, 204),
        ("pals", "all", 384, 102),
        ("pals", "top", 768, 276),
        ("pals", "bottom", 384, 138),
        ("pals_no_sharing", "all", 768, 84),
        ("pals_no_sharing", "all", 384, 42),
        ("low_rank", "all", 768, 100),
        ("low_rank", "all", 384, 50),
        ("none", "all", 768, 0),
    ],
)
def test_default_sizes_follow_the_paper_scaled_to_width(adapter, placement, hidden, expected):
    assert AdapterConfig(method=adapter, placement=placement).resolved_size(hidden) == expected


@pytest.mark.parametrize(("hidden", "heads"), [(32, 6), (64, 4), (100, 6), (512, 8)])
def test_default_size_is_a_multiple_of_the_head_count(hidden, heads):
    size = AdapterConfig(num_heads=heads).resolved_size(hidden)
    assert size >= heads and size % heads == 0
    # nearest multiple of the head count to the scaled paper size
    assert abs(size - hidden * 204 / 768) <= heads / 2 + 1e-9 or size == heads


def test_explicit_size_wins_and_low_rank_needs_no_divisibility():
    assert AdapterConfig(size=48).resolved_size(768) == 48
    assert AdapterConfig(method="low_rank", size=7, num_heads=6).resolved_size(32) == 7


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"method": "prefix_tuning"}, "Unknown adapter method 'prefix_tuning'. Choose one of pals, "),
        ({"placement": "middle"}, "placement"),
        ({"init": "ones"}, "init"),
        ({"size": 100, "num_heads": 6}, "not divisible"),
        ({"size": 0}, "positive"),
        ({"size": True}, "positive"),
        ({"num_heads": 0}, "num_heads"),
        ({"num_layers": 2}, "only applies"),
        ({"placement": "top", "num_layers": 0}, "num_layers"),
    ],
)
def test_bad_values_raise_user_errors(kwargs, fragment):
    with pytest.raises(PalUserError, match=fragment):
        AdapterConfig(**kwargs)


def test_layer_indices_for_each_placement():
    assert AdapterConfig().layer_indices(4) == (0, 1, 2, 3)
    assert AdapterConfig(placement="top", num_layers=2).layer_indices(6) == (4, 5)
    assert AdapterConfig(placement="bottom", num_layers=2).layer_indices(6) == (0, 1)
    assert AdapterConfig(placement="top").layer_indices(5) == (2, 3, 4)  # half, rounded up
    assert AdapterConfig(method="none").layer_indices(12) == ()
    with pytest.raises(PalUserError, match="exceeds"):
        AdapterConfig(placement="top", num_layers=7).layer_indices(6)


def test_replace_validates_and_rejects_unknown_fields():
    cfg = AdapterConfig().replace(size=12, num_heads=4)
    assert (cfg.size, cfg.num_heads) == (12, 4)
    with pytest.raises(PalUserError, match=r"Unknown adapter option\(s\) \['pal_size'\]"):
        AdapterConfig().replace(pal_size=12)
    with pytest.raises(PalUserError, match="not divisible"):
        AdapterConfig().replace(size=10)
    # a new method drops the old one's own options, keeps the common ones
    lora = AdapterConfig(method="lora", alpha=4, size=8, num_heads=2)
    assert lora.replace(method="pals") == AdapterConfig(size=8, num_heads=2)


def test_each_method_has_its_own_config_class_chosen_by_method():
    assert type(AdapterConfig(method="lora", alpha=4)) is LoraConfig is config_class("lora")
    assert (
        type(AdapterConfig(method="houlsby")) is BottleneckConfig and type(AdapterConfig()) is AdapterConfig
    )
    assert LoraConfig(alpha=4) == AdapterConfig(method="lora", alpha=4)
    assert option_names("lora")[-3:] == ("targets", "alpha", "dropout") and "alpha" not in option_names(
        "pals"
    )
    config = AdapterConfig(method="pfeiffer", reduction_factor=4)
    assert copy.deepcopy(config) == pickle.loads(pickle.dumps(config)) == config
    with pytest.raises(PalUserError, match="LoraConfig is not the config of method 'pals'"):
        LoraConfig(method="pals")


def test_an_option_the_method_lacks_is_one_line_naming_its_options():
    with pytest.raises(PalUserError) as err:
        AdapterConfig(method="lora", rank=16)
    message = str(err.value)
    assert "\n" not in message and message.startswith(
        "Unknown adapter option adapter.rank: no registered method has it. Check its spelling"
    )
    assert message.endswith("targets, alpha, dropout.")
    with pytest.raises(
        PalUserError, match=r"adapter.alpha does not apply to method 'pals' \(alpha is an option of lora\)"
    ):
        AdapterConfig.coerce({"method": "pals", "alpha": 4})


def test_mappings_from_yaml_the_command_line_and_earlier_saves():
    # the command line's dotted keys: jsonargparse hands a null item over as the string "None"
    assert AdapterConfig.coerce({"method": "lora", "size": "None", "alpha": 4}) == LoraConfig(alpha=4)
    # an earlier version saved every method's options, null where unset
    earlier = {**AdapterConfig().to_dict(), "targets": None, "alpha": None, "reduction_factor": None}
    assert AdapterConfig.coerce(earlier) == AdapterConfig() and "alpha" not in AdapterConfig().to_dict()
    assert AdapterConfig.coerce({"size": 8, "num_heads": 2}) == AdapterConfig(size=8, num_heads=2)
    assert AdapterConfig.coerce("lora") == LoraConfig() and AdapterConfig.coerce(None) == AdapterConfig()
    assert AdapterConfig.coerce({"method": "lora", "targets": ["value", "query"]}).to_dict()["targets"] == [
        "query",
        "value",
    ]
