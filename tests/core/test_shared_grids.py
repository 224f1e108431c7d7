"""The default grids: an op that only selects values of its input (a max pooling, a ReLU)
shares one grid with its input's quantizer, and a model output is not clipped to the
calibration samples.

Both frameworks quantize the same two nets (PyTorch layouts, Keras built from the same
weights):

- ``pool_net``: conv0 -> max pool -> conv1 (the output). conv0 feeds only the pool, so its
  grid is the pool's, chosen on the values the pool passes on.
- ``branch_net``: conv0 -> max pool -> conv1, and conv0 -> conv2; add -> (the output). conv0
  also feeds conv2, so the pool takes conv0's grid.
"""

from __future__ import annotations

import numpy as np
import pytest

import model_compression_toolkit as mct
from model_compression_toolkit.core.calibration.outputs import unseen_range
from model_compression_toolkit.core.calibration.shared_grids import link_selections, selects_values
from model_compression_toolkit.core.calibration.statistics import StatisticsCollector
from model_compression_toolkit.core.calibration.thresholds import _histogram_values
from model_compression_toolkit.core.config import QuantizationErrorMethod as QE
from model_compression_toolkit.core.config import QuantizationMethod as QM
from model_compression_toolkit.core.graph import Graph, Node, OpKind
from model_compression_toolkit.core.quant_config import ActivationQuantConfig, NodeQuantConfig
from model_compression_toolkit.pipeline.backends import get_backend
from model_compression_toolkit.pipeline.session import produced_graph

SIZE = 12


def _weights(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "conv0.weight": rng.normal(0, 0.4, (8, 3, 3, 3)), "conv0.bias": rng.normal(0, 0.1, 8),
        "conv1.weight": rng.normal(0, 0.2, (4, 8, 3, 3)), "conv1.bias": rng.normal(0, 0.05, 4),
        "conv2.weight": rng.normal(0, 0.2, (4, 8, 1, 1)), "conv2.bias": rng.normal(0, 0.05, 4),
    }  # fmt: skip


def _torch_net(branch: bool):
    import torch
    from torch import nn

    w = {k: torch.tensor(v, dtype=torch.float32) for k, v in _weights().items()}

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv0 = nn.Conv2d(3, 8, 3, padding=1)
            self.pool = nn.MaxPool2d(3, stride=1, padding=1)
            self.conv1 = nn.Conv2d(8, 4, 3, padding=1)
            self.conv2 = nn.Conv2d(8, 4, 1)

        def forward(self, x):
            y = self.conv0(x)
            out = self.conv1(self.pool(y))
            return out + self.conv2(y) if branch else out

    net = Net()
    with torch.no_grad():
        for name in ("conv0", "conv1", "conv2"):
            getattr(net, name).weight.copy_(w[f"{name}.weight"])
            getattr(net, name).bias.copy_(w[f"{name}.bias"])
    return net.eval()


def _keras_net(branch: bool):
    import keras

    w = {k: v.astype(np.float32) for k, v in _weights().items()}
    layers = keras.layers
    inputs = keras.Input((SIZE, SIZE, 3))
    y = layers.Conv2D(8, 3, padding="same", name="conv0")(inputs)
    out = layers.Conv2D(4, 3, padding="same", name="conv1")(layers.MaxPooling2D(3, 1, "same", name="pool")(y))
    if branch:
        out = layers.Add(name="add")([out, layers.Conv2D(4, 1, name="conv2")(y)])
    model = keras.Model(inputs, out)
    for name in ("conv0", "conv1", "conv2") if branch else ("conv0", "conv1"):
        model.get_layer(name).set_weights([w[f"{name}.weight"].transpose(2, 3, 1, 0), w[f"{name}.bias"]])
    return model


def _net(fw, branch: bool = False):
    return _torch_net(branch) if fw.name == "pytorch" else _keras_net(branch)


def _data(fw, n: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, 3, SIZE, SIZE)).astype(np.float32)
    return x.transpose(0, 2, 3, 1).copy() if fw.channels_last else x


def _quantize(fw, branch: bool = False, method: QM | None = None, keep: tuple[str, ...] = ()):
    calibration = _data(fw, 64, seed=10)
    config = mct.core.CoreConfig(
        quantization_config=mct.core.QuantizationConfig(activation_quantization_method=method),
        debug_config=mct.core.DebugConfig(analyze_similarity=False),
        keep_float=mct.core.KeepFloat(names=list(keep), weights=False) if keep else (),
        quantize_outputs=True,  # the output's own grid is part of what these tests judge
    )
    q_model, _ = fw.ptq(
        _net(fw, branch),
        lambda: iter([[calibration[i : i + 16]] for i in range(0, 64, 16)]),
        core_config=config,
    )
    return q_model


def _pool(graph: Graph) -> str:
    return next(n.name for n in graph.nodes() if n.kind == OpKind.POOL)


def _conv0(graph: Graph) -> str:
    return next(n.name for n in graph.nodes() if n.kind == OpKind.CONV and "conv0" in n.name)


def _grid(graph: Graph, name: str) -> tuple[float, float, int, int]:
    g = graph.node(name).quant.activation.grid
    return float(np.asarray(g.scale)), float(np.asarray(g.zero_point)), g.qmin, g.qmax


def _outputs(fw, graph: Graph, x: np.ndarray) -> np.ndarray:
    model = get_backend(_net(fw), fw.name).build(graph, quantized=True)
    return fw.predict(model)(x).astype(np.float64)


def _without(graph: Graph, name: str) -> Graph:
    out = graph.copy()
    out.node(name).quant.activation = None
    return out


@pytest.mark.parametrize("branch", [False, True], ids=["pool_alone", "branch"])
def test_a_max_pool_and_its_input_share_one_grid_and_either_quantizer_alone_gives_the_same_model(fw, branch):
    graph = produced_graph(_quantize(fw, branch))
    pool, conv0 = _pool(graph), _conv0(graph)
    assert _grid(graph, pool) == _grid(graph, conv0)
    if branch:  # conv0 also feeds conv2: its own grid serves both
        assert graph.node(pool).quant.activation.grid_from == conv0
    else:  # the pool alone reads conv0: the grid is chosen on what it passes on
        assert graph.node(conv0).quant.activation.grid_from == pool
    x = _data(fw, 16, seed=11)
    both = _outputs(fw, graph, x)
    # the rounding commutes with the max: one quantizer off changes nothing, exactly
    np.testing.assert_array_equal(_outputs(fw, _without(graph, pool), x), both)
    if not branch:
        np.testing.assert_array_equal(_outputs(fw, _without(graph, conv0), x), both)


def test_a_shared_grid_loses_less_than_two_grids_in_a_row(fw):
    """The pool's own grid after conv0's adds a second rounding; sharing leaves only one."""
    x = _data(fw, 64, seed=11)
    ref = fw.predict(_net(fw))(x).astype(np.float64)
    graph = produced_graph(_quantize(fw))
    pool, conv0 = _pool(graph), _conv0(graph)
    # conv0 on the grid chosen on its own values (the pool float meanwhile), as before sharing:
    # every value the pool passes on is rounded twice
    own = produced_graph(_quantize(fw, keep=(pool,))).node(conv0).quant.activation
    assert own.grid_from is None and float(np.asarray(own.grid.scale)) != _grid(graph, conv0)[0]
    two = graph.copy()
    two.node(conv0).quant.activation = own

    def sqnr(g: Graph) -> float:
        return float(10 * np.log10(np.sum(ref**2) / np.sum((_outputs(fw, g, x) - ref) ** 2)))

    only_pool = sqnr(_without(graph, conv0))
    assert sqnr(graph) == pytest.approx(only_pool, abs=1e-6)
    assert sqnr(two) < only_pool - 0.3


def test_a_named_method_keeps_every_grid_its_own(fw):
    """Sharing is the default's choice: a method the user names quantizes each output on its own grid."""
    graph = produced_graph(_quantize(fw, method=QM.SYMMETRIC))
    assert all(n.quant.activation.grid_from is None for n in graph.nodes() if n.quant.activation)


# ------------------------------------------------------------------ on graphs
def _node(graph: Graph, name: str, kind: OpKind, layer_type: str, **attrs) -> Node:
    node = Node(name, kind, layer_type, attrs=attrs, output_shapes=[(None, 4)])
    node.quant = NodeQuantConfig(activation=ActivationQuantConfig(8, QM.SYMMETRIC, QE.MSE, choose_grid=True))
    graph.add_node(node)
    return node


def test_which_ops_select_values():
    g = Graph("g", "pytorch")
    assert selects_values(_node(g, "mp", OpKind.POOL, "MaxPool2d"))
    assert selects_values(_node(g, "gmp", OpKind.POOL, "GlobalMaxPooling2D"))
    assert not selects_values(_node(g, "ap", OpKind.POOL, "AvgPool2d"))  # an average is a new value
    assert selects_values(_node(g, "r", OpKind.ACTIVATION, "ReLU", function="relu"))
    assert not selects_values(_node(g, "r6", OpKind.ACTIVATION, "ReLU", function="relu", max_value=6.0))
    assert not selects_values(_node(g, "lr", OpKind.ACTIVATION, "LeakyReLU", function="leaky_relu"))


def test_links_need_the_same_bits_and_are_made_once():
    g = Graph("g", "pytorch")
    a, relu = _node(g, "a", OpKind.ADD, "add"), _node(g, "relu", OpKind.ACTIVATION, "ReLU", function="relu")
    other = _node(g, "other", OpKind.ACTIVATION, "Sigmoid", function="sigmoid")
    g.add_edge("a", "relu")
    g.add_edge("a", "other")  # a feeds two layers: the ReLU takes a's grid
    relu.quant.activation.n_bits = 16
    assert link_selections(g) == []
    relu.quant.activation.n_bits = 8
    assert link_selections(g) == [("relu", "a")] and link_selections(g) == []
    assert a.quant.activation.grid_from is None and other.quant.activation.grid_from is None


# ------------------------------------------------------------------ model outputs
def test_an_output_range_reaches_past_the_calibration_values_by_their_tail_spread():
    rng = np.random.default_rng(0)
    x = rng.normal(0, 1, (32, 4))
    c = StatisticsCollector(channel_axis=None)
    c.update(x.astype(np.float32))
    s = c.result()
    values, low, high = _histogram_values(s)
    lo, hi = unseen_range(values, low, high, s.count, 4, None)
    top = np.sort(x.ravel())
    assert lo < low and hi > high
    assert hi - high == pytest.approx(top[-1] - top[-4], rel=0.05)  # the spread of the 4 largest of 128
    assert low - lo == pytest.approx(top[3] - top[0], rel=0.05)
    # a function's bounds hold: a sigmoid never passes 1, a ReLU output stays >= 0
    assert unseen_range(values, 0.2, 0.99, s.count, 4, (0.0, 1.0))[1] <= 1.0
    assert unseen_range(values, 0.0, high, s.count, 4, None)[0] == 0.0
    # one sample: nothing to extrapolate from
    assert unseen_range(values, low, high, 4, 4, None) == (low, high)


def test_a_model_output_is_not_clipped_to_the_calibration_samples(fw):
    """The branch net's output on held-out data: its default grid covers what calibration saw,
    and more, where the user's named method clips to the least error on those samples."""
    default = produced_graph(_quantize(fw, branch=True))
    named = produced_graph(_quantize(fw, branch=True, method=QM.SYMMETRIC))
    out = next(name for name, _ in default.outputs)
    act, old = default.node(out).quant.activation, named.node(out).quant.activation
    assert act.model_output and act.values_per_sample == 4 * SIZE * SIZE
    scale, zero = float(np.asarray(act.grid.scale)), float(np.asarray(act.grid.zero_point))
    low, top = scale * (act.grid.qmin - zero), scale * (act.grid.qmax - zero)
    y = fw.predict(_net(fw, True))(_data(fw, 64, seed=10))  # the calibration samples' outputs
    assert low < float(np.min(y)) and top > float(np.max(y))  # none clipped, room past both ends
    assert old.threshold < float(np.max(np.abs(y)))  # the named method's search clips them
