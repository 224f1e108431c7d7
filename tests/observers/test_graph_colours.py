"""The graph's colours judge each layer by its own quantizers, never by a neighbour's.

    digits CNN: first conv's weights at 2 bits (cause 1), second block's ReLU with an
    outlier channel (cause 2) -> PTQ into a log folder -> 5_quantized_graph's graph read
    back with TensorBoard's loader -> each node's device (its colour class)

A conv and the ReLU fused after it are two quantizers (weights, output): the conv with
ruined weights is the cause, not its ReLU; the ReLU with a ruined grid is the cause, not
the conv before it. The layer downstream of a cause whose own quantizers are fine is
"inherited", never "high".
"""

from __future__ import annotations

import warnings

import model_compression_toolkit as mct
from model_compression_toolkit.observers.stage_view import stage_run
from tests.fixtures.damage import _keras_layers, outlier_channel
from tests.fixtures.digits import representative_dataset
from tests.fixtures.tb import layer_name, load, run_folders


def _classes(log_folder) -> dict[str, str]:
    """Layer -> its colour class (``high``, ``medium``, ``low``, ``inherited``, ``none``), from
    the device TensorBoard colours it by."""
    (call,) = run_folders(log_folder)
    graph = load(call / stage_run("quantized_graph")).Graph()
    out = {}
    for node in graph.node:
        if node.op == "legend":
            continue
        label = node.device.removeprefix("/device:").split(" ")[0]
        out[layer_name(node.name)] = label
    return out


def test_each_layer_is_coloured_by_its_own_quantizers(fw, trained_digits, tmp_path):
    model, x_train, _, _ = trained_digits
    with warnings.catch_warnings():  # Keras on the fixture's probe model: a list of one input expected
        warnings.simplefilter("ignore", UserWarning)
        bad, names = outlier_channel(fw.name, model, x_train[:64])
    if fw.name == "pytorch":
        first_conv, first_relu, second_conv = "0", "2", "3"
    else:
        convs, relus = _keras_layers(bad, "Conv2D"), _keras_layers(bad, "ReLU")
        first_conv, first_relu, second_conv = convs[0].name, relus[0].name, convs[1].name
    bits = mct.core.BitWidthConfig()
    bits.set_manual_weights_bit_width(mct.core.network_editor.NodeNameFilter(first_conv), 2)
    mct.set_log_folder(tmp_path)
    try:
        _, info = fw.ptq(bad, representative_dataset(x_train), core_config=mct.core.CoreConfig(bit_width_config=bits))
    finally:
        mct.set_log_folder(None)
    causes = {(q.name, q.kind) for q in info.similarity.causes()}
    assert (first_conv, "weights") in causes and (names["activation"], "activation") in causes, causes

    classes = _classes(tmp_path)
    assert classes[first_conv] == "high", classes  # its 2-bit weights
    assert classes[names["activation"]] == "high", classes  # its ruined grid
    # their neighbours' own quantizers are fine: they are not blamed for the causes next to them
    assert classes[first_relu] in ("inherited", "low"), classes
    assert classes[second_conv] in ("inherited", "low"), classes
    assert sum(c == "high" for c in classes.values()) == len(causes), classes
