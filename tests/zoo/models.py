"""The zoo: real architectures from torchvision, timm, Hugging Face transformers,
keras.applications and keras_hub, built with random weights from their configs (no
download), small enough to quantize in seconds on 2 cores.

Each `ZooModel` builds its model and its representative batches. PyTorch batches are
channels-first images, or token ids (a list in ``forward``'s argument order, or a dict
of keyword inputs); Keras batches are channels-last images or keras_hub's input dicts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from tests.zoo import torchvision_ops

torchvision_ops.install()

SEED = 0


@dataclass(frozen=True)
class ZooModel:
    name: str
    framework: str  # "pytorch" or "keras"
    family: (
        str  # "cnn", "mobile", "vit", "text", "keras-cnn", "keras-text", "keras-vit" (tests/zoo/test_zoo.py)
    )
    build: Callable[[], Any]
    batches: Callable[[], list]  # the representative batches (the first is the float reference)
    calibrate: bool = False

    def make(self) -> Any:
        """The model with random weights, in eval mode. With ``calibrate``, its batch norms
        get the statistics of the representative data, as training would give them: with
        torchvision's initial ones (mean 0, variance 1) the activations of MobileNetV3 shrink
        layer after layer (its logits end near 1e-10), which no trained model does."""
        model = self.build()
        if self.calibrate:
            _calibrate_batch_norms(model, _calibration_batches(self.batches()))
        return model


def _calibration_batches(batches: list, n: int = 32) -> list:
    """``n`` samples like the first batch's (normal noise of its shape), for batch norms'
    statistics: over 4 samples, a 1x1 map's statistics make a network amplify any noise."""
    first = batches[0][0]
    rng = np.random.default_rng(SEED + 1)
    return [[rng.standard_normal((n, *first.shape[1:])).astype(np.float32)]]


def _calibrate_batch_norms(model: Any, batches: list) -> None:
    if not hasattr(model, "modules"):  # Keras: moving statistics of one training-mode call
        import keras

        norms = [
            layer for layer in model._flatten_layers() if isinstance(layer, keras.layers.BatchNormalization)
        ]
        for layer in norms:
            layer.momentum = 0.0
        model(np.concatenate([b[0] for b in batches]), training=True)
        for layer in norms:
            layer.momentum = 0.99
        return
    import torch

    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # a cumulative average over the batches
    model.train()
    with torch.no_grad():
        for batch in batches:
            if isinstance(batch, dict):
                model(**{k: torch.as_tensor(v) for k, v in batch.items()})
            else:
                model(*(torch.as_tensor(v) for v in batch))
    model.eval()


def _images(size: int, channels_last: bool = False, n: int = 4, batches: int = 2) -> list:
    rng = np.random.default_rng(SEED)
    shape = (n, size, size, 3) if channels_last else (n, 3, size, size)
    return [[rng.standard_normal(shape).astype(np.float32)] for _ in range(batches)]


def _tokens(vocab: int, length: int = 16, n: int = 4, batches: int = 2, mask: bool = True) -> list:
    """Dict batches of keyword inputs: ids and an attention mask with padding at the end."""
    rng = np.random.default_rng(SEED)
    out = []
    for _ in range(batches):
        ids = rng.integers(1, vocab, (n, length)).astype(np.int64)
        batch = {"input_ids": ids}
        if mask:
            attention = np.ones((n, length), np.int64)
            attention[0, length - 3 :] = 0
            batch["attention_mask"] = attention
        out.append(batch)
    return out


# ---------------------------------------------------------------- PyTorch
def _seeded(build: Callable[[], Any]) -> Callable[[], Any]:
    def make() -> Any:
        import torch

        torch.manual_seed(SEED)
        return build().eval()

    return make


def _timm(name: str, **kwargs: Any) -> Callable[[], Any]:
    def build() -> Any:
        import timm

        return timm.create_model(name, pretrained=False, num_classes=10, **kwargs)

    return _seeded(build)


def _torchvision(name: str, **kwargs: Any) -> Callable[[], Any]:
    def build() -> Any:
        import torch
        import torchvision

        if name == "VisionTransformer":  # torchvision's ViT (nn.MultiheadAttention) at a small size
            model = torchvision.models.VisionTransformer(**kwargs)
        else:
            model = getattr(torchvision.models, name)(weights=None, num_classes=10, **kwargs)
        for module in model.modules():  # torchvision starts some heads at zero: outputs all 0
            if isinstance(module, torch.nn.Linear) and not module.weight.any():
                torch.nn.init.normal_(module.weight, std=0.02)
        return model

    return _seeded(build)


def _hf(config_class: str, model_class: str, **config: Any) -> Callable[[], Any]:
    def build() -> Any:
        import transformers

        cfg = getattr(transformers, config_class)(**config)
        return getattr(transformers, model_class)(cfg)

    return _seeded(build)


_BERT = dict(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
_BERT |= dict(max_position_embeddings=32)
_HF_VIT = dict(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=2)
_HF_VIT |= dict(intermediate_size=64, num_labels=10)


def _as_list(batches: list, keys: tuple[str, ...]) -> list:
    """Dict batches as lists in ``forward``'s argument order (how MCT users yield them)."""
    return [[b[k] for k in keys] for b in batches]


PYTORCH = [
    ZooModel("tv_resnet18", "pytorch", "cnn", _torchvision("resnet18"), lambda: _images(32)),
    ZooModel("tv_mobilenet_v3_small", "pytorch", "mobile", _torchvision("mobilenet_v3_small"), lambda: _images(32),
             calibrate=True),
    ZooModel(
        "tv_vit", "pytorch", "vit",
        _torchvision("VisionTransformer", image_size=32, patch_size=8, num_layers=2, num_heads=2,
                     hidden_dim=32, mlp_dim=64, num_classes=10),
        lambda: _images(32),
    ),
    ZooModel("timm_vit_tiny", "pytorch", "vit", _timm("vit_tiny_patch16_224", img_size=32), lambda: _images(32)),
    ZooModel("timm_deit_tiny", "pytorch", "vit", _timm("deit_tiny_patch16_224", img_size=32), lambda: _images(32)),
    ZooModel("timm_levit_128s", "pytorch", "vit", _timm("levit_128s", img_size=64), lambda: _images(64)),
    ZooModel("timm_maxvit_nano", "pytorch", "vit", _timm("maxvit_nano_rw_256", img_size=64), lambda: _images(64)),
    ZooModel(
        "timm_swin_tiny", "pytorch", "vit",
        _timm("swin_tiny_patch4_window7_224", img_size=56, window_size=7, embed_dim=48, depths=(1, 1, 2, 1),
              num_heads=(2, 2, 4, 8)),
        lambda: _images(56),
    ),
    ZooModel("timm_efficientnet_b0", "pytorch", "cnn", _timm("efficientnet_b0"), lambda: _images(32)),
    ZooModel("timm_mobilenetv3_large", "pytorch", "mobile", _timm("mobilenetv3_large_100"), lambda: _images(32)),
    ZooModel("timm_convnext_atto", "pytorch", "cnn", _timm("convnext_atto"), lambda: _images(32)),
    ZooModel("hf_bert", "pytorch", "text", _hf("BertConfig", "BertModel", **_BERT), lambda: _tokens(100)),
    ZooModel(
        "hf_bert_classifier", "pytorch", "text",
        _hf("BertConfig", "BertForSequenceClassification", num_labels=3, **_BERT),
        lambda: _as_list(_tokens(100), ("input_ids", "attention_mask")),
    ),
    ZooModel(
        "hf_distilbert", "pytorch", "text",
        _hf("DistilBertConfig", "DistilBertModel", vocab_size=100, dim=32, n_layers=2, n_heads=2, hidden_dim=64,
            max_position_embeddings=32),
        lambda: _tokens(100),
    ),
    ZooModel(
        "hf_gpt2_lm", "pytorch", "text",
        _hf("GPT2Config", "GPT2LMHeadModel", vocab_size=100, n_positions=32, n_embd=32, n_layer=2, n_head=2,
            bos_token_id=1, eos_token_id=2),
        lambda: _as_list(_tokens(100, mask=False), ("input_ids",)),
    ),
    ZooModel(
        "hf_t5_encoder", "pytorch", "text",
        _hf("T5Config", "T5EncoderModel", vocab_size=100, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2),
        lambda: _tokens(100),
    ),
    ZooModel(
        "hf_vit_classifier", "pytorch", "vit",
        _hf("ViTConfig", "ViTForImageClassification", **_HF_VIT),
        lambda: [{"pixel_values": b[0]} for b in _images(32)],
    ),
]  # fmt: skip


# ---------------------------------------------------------------- Keras
def _application(name: str, size: int = 32, **kwargs: Any) -> Callable[[], Any]:
    def make() -> Any:
        import keras

        keras.utils.set_random_seed(SEED)
        return getattr(keras.applications, name)(
            weights=None, input_shape=(size, size, 3), classes=10, classifier_activation=None, **kwargs
        )

    return make


def _hub(name: str, **config: Any) -> Callable[[], Any]:
    def make() -> Any:
        import keras
        import keras_hub

        keras.utils.set_random_seed(SEED)
        return getattr(keras_hub.models, name)(**config)

    return make


def _hub_tokens(keys: tuple[str, ...], vocab: int = 100, length: int = 16) -> list:
    rng = np.random.default_rng(SEED)
    out = []
    for _ in range(2):
        batch = {"token_ids": rng.integers(1, vocab, (4, length)).astype(np.int32)}
        if "padding_mask" in keys:
            mask = np.ones((4, length), np.int32)
            mask[0, length - 3 :] = 0
            batch["padding_mask"] = mask
        if "segment_ids" in keys:
            batch["segment_ids"] = np.zeros((4, length), np.int32)
        out.append(batch)
    return out


KERAS = [
    ZooModel("keras_mobilenet_v2", "keras", "mobile", _application("MobileNetV2"), lambda: _images(32, True),
             calibrate=True),
    ZooModel("keras_mobilenet_v3_small", "keras", "mobile", _application("MobileNetV3Small"),
             lambda: _images(32, True), calibrate=True),
    ZooModel("keras_efficientnet_v2_b0", "keras", "keras-cnn", _application("EfficientNetV2B0"),
             lambda: _images(32, True)),
    ZooModel("keras_resnet50_v2", "keras", "keras-cnn", _application("ResNet50V2"), lambda: _images(32, True)),
    ZooModel("keras_densenet121", "keras", "keras-cnn", _application("DenseNet121"), lambda: _images(32, True)),
    ZooModel("keras_nasnet_mobile", "keras", "keras-cnn", _application("NASNetMobile"), lambda: _images(32, True)),
    ZooModel("keras_convnext_tiny", "keras", "keras-cnn", _application("ConvNeXtTiny"), lambda: _images(32, True)),
    ZooModel(
        "keras_hub_bert", "keras", "keras-text",
        _hub("BertBackbone", vocabulary_size=100, num_layers=2, num_heads=2, hidden_dim=32, intermediate_dim=64,
             max_sequence_length=32),
        lambda: _hub_tokens(("token_ids", "padding_mask", "segment_ids")),
    ),
    ZooModel(
        "keras_hub_gpt2", "keras", "keras-text",
        _hub("GPT2Backbone", vocabulary_size=100, num_layers=2, num_heads=2, hidden_dim=32, intermediate_dim=64,
             max_sequence_length=32),
        lambda: _hub_tokens(("token_ids", "padding_mask")),
    ),
    ZooModel(
        "keras_hub_vit", "keras", "keras-vit",
        _hub("ViTBackbone", image_shape=(32, 32, 3), patch_size=8, num_layers=2, num_heads=2, hidden_dim=32,
             mlp_dim=64),
        lambda: _images(32, True),
    ),
]  # fmt: skip

ZOO = {m.name: m for m in PYTORCH + KERAS}
