"""A layer named with HTML shows as text in every card of the Text dashboard.

    model with a layer named ``<img src=x onerror=alert(1)>`` -> PTQ into a log folder
    (similarity analysis on, a layer kept float, a cause) -> every text summary of every
    run read back with TensorBoard's loader -> rendered by TensorBoard's own Markdown
    sanitizer (what the Text dashboard shows) -> no element made of the name
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import model_compression_toolkit as mct
from tests.fixtures.tb import load

HTML_NAME = "<img src=x onerror=alert(1)>"
EMPHASIS_NAME = "**bold**_x_"


def _model(fw_name: str):
    """dense -> relu (named with HTML) -> dense (named with Markdown emphasis), its first
    layer given 2-bit weights by name so the report has a cause to name."""
    rng = np.random.default_rng(0)
    w1, w2 = rng.normal(size=(16, 12)).astype(np.float32), rng.normal(size=(3, 16)).astype(np.float32)
    if fw_name == "pytorch":
        from collections import OrderedDict

        import torch

        first, last = torch.nn.Linear(12, 16), torch.nn.Linear(16, 3)
        with torch.no_grad():
            first.weight.copy_(torch.from_numpy(w1))
            last.weight.copy_(torch.from_numpy(w2))
        layers = OrderedDict([("first", first), (HTML_NAME, torch.nn.ReLU()), (EMPHASIS_NAME, last)])
        return torch.nn.Sequential(layers)
    import keras

    inputs = keras.Input((12,))
    first = keras.layers.Dense(16, name="first")
    last = keras.layers.Dense(3, name=EMPHASIS_NAME)
    out = last(keras.layers.ReLU(name=HTML_NAME)(first(inputs)))
    model = keras.Model(inputs, out)
    first.set_weights([w1.T, np.zeros(16, np.float32)])
    last.set_weights([w2.T, np.zeros(3, np.float32)])
    return model


def _texts(log_folder: Path) -> dict[str, str]:
    """Every text summary in every run under ``log_folder``: 'run/tag' -> Markdown."""
    texts = {}
    for events in sorted(log_folder.rglob("events.out.tfevents.*")):
        acc = load(events.parent)
        for tag in acc.Tags().get("tensors", []):
            for event in acc.Tensors(tag):
                values = event.tensor_proto.string_val
                if values:
                    texts[f"{events.parent.relative_to(log_folder)}/{tag}"] = values[0].decode("utf-8")
    return texts


@pytest.mark.parametrize("framework", ["pytorch", "keras"])
def test_a_layer_named_with_html_or_markdown_shows_as_text_in_every_text_card(framework, tmp_path):
    from tensorboard.plugin_util import markdown_to_safe_html

    model = _model(framework)
    x = np.random.default_rng(1).normal(size=(64, 12)).astype(np.float32)
    bits = mct.core.BitWidthConfig()
    bits.set_manual_weights_bit_width(mct.core.common.network_editors.NodeNameFilter("first"), 2)
    config = mct.core.CoreConfig(bit_width_config=bits, keep_float=mct.core.KeepFloat(names=[EMPHASIS_NAME]))
    ptq = getattr(mct.ptq, f"{framework}_post_training_quantization")
    mct.set_log_folder(tmp_path)
    try:
        ptq(model, lambda: iter([[x[:32]], [x[32:]]]), core_config=config)
    finally:
        mct.set_log_folder(None)

    texts = _texts(tmp_path)
    named = {key: md for key, md in texts.items() if "img src=x" in md}
    assert named, f"no text card names the layer; cards: {sorted(texts)}"
    for key, markdown in named.items():
        html = markdown_to_safe_html(markdown)
        assert "<img" not in html, f"{key} made an element of the layer's name:\n{html}"
        assert "&lt;img src=x onerror=alert(1)&gt;" in html, f"{key} does not show the name as written:\n{html}"
    emphasised = {key: md for key, md in texts.items() if "bold" in md}
    assert emphasised
    for key, markdown in emphasised.items():
        html = markdown_to_safe_html(markdown)
        assert not re.search(r"<(strong|em)>bold", html), f"{key} rendered the layer's name as emphasis:\n{html}"


def test_prose_holding_a_name_shows_it_as_written():
    """Notes and reasons (the export's per-layer table) carry names inside prose: `plain`
    keeps them text through TensorBoard's own Markdown sanitizer."""
    from tensorboard.plugin_util import markdown_to_safe_html

    from model_compression_toolkit.observers.tables import plain

    html = markdown_to_safe_html(plain(f"fused: '{HTML_NAME}', '{EMPHASIS_NAME}', 'a`b' [x](y)"))
    assert "<img" not in html and "<strong>" not in html and "<em>" not in html and "<a " not in html, html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html and "**bold**_x_" in html, html


@pytest.mark.parametrize("framework", ["pytorch", "keras"])
def test_a_float_reason_that_names_a_layer_shows_it_as_written_in_the_summary(framework, tmp_path):
    """A network editor rule that turns a layer's output quantizer off is that layer's float
    reason, and the rule names the layer: the Summary's "Kept in float" list shows it as text."""
    from tensorboard.plugin_util import markdown_to_safe_html

    editor = mct.core.network_editor
    rule = editor.EditRule(
        filter=editor.NodeNameFilter(HTML_NAME),
        action=editor.ChangeCandidatesActivationQuantConfigAttr(enable_activation_quantization=False),
    )
    config = mct.core.CoreConfig(debug_config=mct.core.DebugConfig(network_editor=[rule], analyze_similarity=False))
    x = np.random.default_rng(1).normal(size=(64, 12)).astype(np.float32)
    ptq = getattr(mct.ptq, f"{framework}_post_training_quantization")
    mct.set_log_folder(tmp_path)
    try:
        _, info = ptq(_model(framework), lambda: iter([[x[:32]], [x[32:]]]), core_config=config)
    finally:
        mct.set_log_folder(None)
    assert HTML_NAME in info.float_layers[HTML_NAME]  # the reason names the rule's filter
    summaries = [md for key, md in _texts(tmp_path).items() if "Kept in float" in md]
    assert summaries
    for markdown in summaries:
        html = markdown_to_safe_html(markdown.split("Kept in float", 1)[1].split("\n\n|", 1)[0])
        assert "<img" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html, html
