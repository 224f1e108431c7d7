"""A call's name in the run menus says what differs from the defaults, manual bit-widths
included (a 2-bit `BitWidthConfig` call, or a suggested fix's 16-bit output, used to have no
suffix and looked like a call with every default)."""

from __future__ import annotations

import model_compression_toolkit as mct
from model_compression_toolkit.core.resolution import resolve_core_config
from model_compression_toolkit.core.similarity.fix import SuggestedFix
from model_compression_toolkit.observers.call_name import call_label


def test_manual_bit_widths_name_the_call():
    bits = mct.core.BitWidthConfig()
    bits.set_manual_weights_bit_width(mct.core.network_editor.NodeNameFilter("conv2"), 2)
    bits.set_manual_activation_bit_width(mct.core.network_editor.NodeNameFilter("relu2"), 16)
    assert call_label(None, mct.core.CoreConfig(bit_width_config=bits)) == "a16-relu2_w2-conv2"


def test_a_suggested_fix_of_bit_widths_names_the_call_once_resolved():
    fix = SuggestedFix(activation_bits={"5": 16}, weight_bits={"6": 12})
    config = resolve_core_config(mct.core.CoreConfig(keep_float=fix))
    assert call_label(None, config) == "a16-5_w12-6"
    assert call_label(None, mct.core.CoreConfig()) == ""


def test_an_equalization_fix_on_an_integer_target_names_the_call_in_words():
    fix = SuggestedFix(equalize=True, equalized_pairs=["3 -> 5 -> 6"])
    config = resolve_core_config(mct.core.CoreConfig(keep_float=fix, integer_only=True))
    assert call_label(None, config) == "equalized_integer"
