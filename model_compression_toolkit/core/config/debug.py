"""`DebugConfig`: what is analysed and logged beyond quantization, and MCT's network editor."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from model_compression_toolkit.core.config.methods import check_not_provided
from model_compression_toolkit.errors import ConfigurationError

_DEBUG_NOT_PROVIDED: dict[str, tuple[object, str]] = {
    "simulate_scheduler": (False, (
        "activation memory is the peak of the tensors alive at once in the graph's topological order; "
        "remove simulate_scheduler")),
    "bypass": (False, "to use the float model, call it directly instead of the PTQ function"),
}


@dataclass
class DebugConfig:
    """What is analysed and logged beyond quantization itself.

    Args:
        analyze_similarity: compare the float and quantized models layer by layer on
            the first ``similarity_samples`` samples and fill ``info.similarity``. None
            (the default): only when a log folder is set; True: always, logged or not;
            False: never.
        similarity_samples: how many representative samples the comparison uses.
        similarity_memory_cap: bytes of layer outputs the comparison may hold at once.
            When the float outputs of all the samples fit, the statistics pass keeps
            them and the float model does not run again; else samples are processed in
            chunks that stay under it.
        impact_samples: the first samples on which each quantizer's damage to the model
            output, with that quantizer alone switched on, is measured (the ranking of
            causes and the suggested fix; see the similarity docs). Whole batches are
            taken until there are this many, so a model traced for one batch size runs.
        max_impact_quantizers: how many quantizers at most get that measure: those whose
            own error is not negligible, the largest first.
        network_editor: MCT's edit rules (`mct.core.network_editor.EditRule`), applied in
            order after the target platform's and the `BitWidthConfig`'s choices.
        simulate_scheduler: MCT's scheduler simulation; not provided (activation memory
            here is the peak of the tensors alive at once in the graph's order).
        bypass: MCT's "return the float model unchanged"; not provided (call the float
            model itself).
    """

    analyze_similarity: bool | None = None
    similarity_samples: int = 20
    similarity_memory_cap: int = 1 << 30
    impact_samples: int = 8
    max_impact_quantizers: int = 12
    network_editor: list = field(default_factory=list)
    simulate_scheduler: bool = False
    bypass: bool = False

    def validate(self) -> None:
        check_not_provided(self, _DEBUG_NOT_PROVIDED)
        if isinstance(self.network_editor, (str, bytes)) or not isinstance(self.network_editor, Sequence):
            raise ConfigurationError(
                f"network_editor must be a list of mct.core.network_editor.EditRule; got {self.network_editor!r}"
            )
        if self.analyze_similarity is not None and not isinstance(self.analyze_similarity, bool):
            raise ConfigurationError(
                f"analyze_similarity must be True, False or None (on when a log folder is set); "
                f"got {self.analyze_similarity!r}"
            )
        if isinstance(self.similarity_samples, bool) or not isinstance(self.similarity_samples, int) or self.similarity_samples < 1:
            raise ConfigurationError(f"similarity_samples must be an integer >= 1; got {self.similarity_samples!r}")
        for name in ("impact_samples", "max_impact_quantizers"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigurationError(f"{name} must be an integer >= 0; got {value!r}")
        if not isinstance(self.similarity_memory_cap, int) or self.similarity_memory_cap < 1 << 20:
            raise ConfigurationError(
                f"similarity_memory_cap must be an integer number of bytes >= 1 MiB; got {self.similarity_memory_cap!r}"
            )
