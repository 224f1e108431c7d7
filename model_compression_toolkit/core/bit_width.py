"""Manual bit-widths for chosen layers: MCT's ``BitWidthConfig``.

    bit_cfg = mct.core.BitWidthConfig()
    bit_cfg.set_manual_activation_bit_width([NodeNameFilter("add_14")], 16)
    bit_cfg.set_manual_weights_bit_width(NodeTypeFilter(torch.nn.Linear), 4, "kernel")
    core_config = mct.core.CoreConfig(bit_width_config=bit_cfg)

Each selection becomes a `NodeRule` (`core.node_rules.bit_width_rules`). A layer whose
weights get manual bits keeps them: mixed precision chooses the bits of the other layers only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from model_compression_toolkit.core.node_filters import NodeFilter
from model_compression_toolkit.errors import ConfigurationError


@dataclass
class ManualBitWidthSelection:
    """Layers ``filter`` selects get ``bit_width``-bit activations."""

    filter: NodeFilter
    bit_width: int


@dataclass
class ManualWeightsBitWidthSelection(ManualBitWidthSelection):
    """Layers ``filter`` selects get ``bit_width``-bit weights ``attr`` (``"kernel"``)."""

    attr: str = "kernel"


def _as_list(value: Any) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _expand(filters: list, values: Any, what: str) -> list:
    values = _as_list(values)
    if len(values) == 1:
        return values * len(filters)
    if len(values) != len(filters):
        raise ConfigurationError(
            f"got {len(values)} {what} for {len(filters)} filters; give one {what[:-1]} for all, or one per filter"
        )
    return values


@dataclass
class BitWidthConfig:
    """Manual bit-widths, as in MCT: activation and weight selections, applied in order
    (a later selection of the same layer wins)."""

    manual_activation_bit_width_selection_list: list[ManualBitWidthSelection] = field(default_factory=list)
    manual_weights_bit_width_selection_list: list[ManualWeightsBitWidthSelection] = field(default_factory=list)

    def set_manual_activation_bit_width(
        self, filters: NodeFilter | Sequence[NodeFilter], bit_widths: int | Sequence[int]
    ) -> None:
        """The outputs of the layers each filter selects get that bit-width (16 included).

        Args:
            filters: one filter, or a list of them.
            bit_widths: one bit-width for all, or one per filter.
        """
        if filters is None:
            raise ConfigurationError("set_manual_activation_bit_width needs filters; got None")
        filters = _as_list(filters)
        for f, bits in zip(filters, _expand(filters, bit_widths, "bit_widths")):
            self.manual_activation_bit_width_selection_list.append(ManualBitWidthSelection(f, bits))

    def set_manual_weights_bit_width(
        self,
        filters: NodeFilter | Sequence[NodeFilter],
        bit_widths: int | Sequence[int],
        attrs: str | Sequence[str] = "kernel",
    ) -> None:
        """The weights ``attrs`` of the layers each filter selects get that bit-width.

        Args:
            filters: one filter, or a list of them.
            bit_widths: one bit-width for all, or one per filter.
            attrs: the weight to set (``"kernel"``; PyTorch's ``"weight"`` is the same).
        """
        if filters is None:
            raise ConfigurationError("set_manual_weights_bit_width needs filters; got None")
        filters = _as_list(filters)
        bits = _expand(filters, bit_widths, "bit_widths")
        for f, b, a in zip(filters, bits, _expand(filters, attrs, "attrs")):
            self.manual_weights_bit_width_selection_list.append(ManualWeightsBitWidthSelection(f, b, a))
