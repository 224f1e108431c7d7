"""Hugging Face transformers models: keyword inputs (dict batches) or lists in forward's
order, captured by torch.export when torch.fx cannot trace them, a ModelOutput back."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from torch import nn

import model_compression_toolkit as mct
from model_compression_toolkit.errors import InputMismatchError, ModelReadError
from model_compression_toolkit.pytorch.backend import PytorchBackend
from model_compression_toolkit.pytorch.ops import CAPTURE_META
from tests.zoo import torchvision_ops

torchvision_ops.install()
transformers = pytest.importorskip("transformers")
BACKEND = PytorchBackend()
NO_SIMILARITY = mct.core.CoreConfig(debug_config=mct.core.DebugConfig(analyze_similarity=False))
_BERT = dict(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)


def _bert_classifier() -> nn.Module:
    torch.manual_seed(0)
    return transformers.BertForSequenceClassification(transformers.BertConfig(num_labels=3, **_BERT)).eval()


def _tokens(n=2, batch=3, length=8):
    rng = np.random.default_rng(0)
    out = []
    for _ in range(n):
        mask = np.ones((batch, length), np.int64)
        mask[0, -3:] = 0
        out.append({"input_ids": rng.integers(1, 50, (batch, length)), "attention_mask": mask})
    return out


def _cos(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.nn.functional.cosine_similarity(a.flatten(), b.flatten(), dim=0))


@pytest.mark.parametrize("as_dict", [True, False], ids=["dict_batches", "list_batches"])
def test_a_bert_classifier_quantizes_from_dict_or_list_batches_and_returns_a_model_output(as_dict):
    model, batches = _bert_classifier(), _tokens()
    data = batches if as_dict else [[b["input_ids"], b["attention_mask"]] for b in batches]
    q_model, info = mct.ptq.pytorch_post_training_quantization(model, lambda: iter(data), NO_SIMILARITY)
    assert info.unsupported_layers == []
    assert info.layers["bert.encoder.layer.0.attention.self.query"].weights["kernel"]["n_bits"] == 8
    ids, mask = (torch.as_tensor(batches[0][k]) for k in ("input_ids", "attention_mask"))
    with torch.no_grad():
        want = model(input_ids=ids, attention_mask=mask)
        by_keyword = q_model(input_ids=ids, attention_mask=mask)
        by_position = q_model(ids, mask)
    assert type(by_keyword) is type(want) is transformers.modeling_outputs.SequenceClassifierOutput
    torch.testing.assert_close(by_position.logits, by_keyword.logits)
    assert _cos(want.logits, by_keyword.logits) > 0.99


def test_a_model_torch_fx_cannot_trace_is_captured_by_torch_export():
    model, batches = _bert_classifier(), _tokens()
    with pytest.raises(Exception):  # noqa: B017 - whatever torch.fx raises for it
        torch.fx.symbolic_trace(model)
    sample = [batches[0]["input_ids"], batches[0]["attention_mask"]]
    graph, _ = BACKEND.read(model, sample)
    assert graph.meta[CAPTURE_META] == "torch.export"
    assert graph.inputs == ["input_ids", "attention_mask"]


def test_a_causal_lm_is_read_without_its_cache_and_says_so():
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=50, n_positions=16, n_embd=16, n_layer=1, n_head=2)
    config.bos_token_id = config.eos_token_id = 1
    model = transformers.GPT2LMHeadModel(config).eval()
    ids = np.random.default_rng(0).integers(1, 50, (2, 8))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        q_model, info = mct.ptq.pytorch_post_training_quantization(model, lambda: [[ids]], NO_SIMILARITY)
    assert any("use_cache=False" in str(w.message) for w in caught)
    assert model.config.use_cache  # the user's model is untouched
    assert info.unsupported_layers == []  # GPT-2's Conv1D (addmm) is a dense layer
    assert info.layers["transformer.h.0.attn.c_attn"].weights["kernel"]["channel_axes"] == [1]
    with torch.no_grad():
        out = q_model(torch.as_tensor(ids))
    assert type(out).__name__ == "CausalLMOutputWithCrossAttentions" and out.logits.shape == (2, 8, 50)


def test_dict_batches_must_give_forward_argument_names_and_the_same_keys_every_time():
    model, batches = _bert_classifier(), _tokens()
    with pytest.raises(InputMismatchError, match=r"forward takes \(input_ids, attention_mask.*got \['ids'\]"):
        mct.ptq.pytorch_post_training_quantization(model, lambda: [{"ids": batches[0]["input_ids"]}])
    uneven = [batches[0], {"input_ids": batches[1]["input_ids"]}]
    with pytest.raises(InputMismatchError, match=r"batch 1 gives \(input_ids\)"):
        mct.ptq.pytorch_post_training_quantization(model, lambda: iter(uneven), NO_SIMILARITY)


def test_a_model_no_path_can_capture_gets_every_path_s_reason():
    class DataDependent(nn.Module):
        def forward(self, x):
            return x * 2 if x.sum() > 0 else x

    with pytest.raises(ModelReadError) as caught:
        BACKEND.read(DataDependent(), [np.ones((1, 3), np.float32)])
    message = str(caught.value)
    assert "torch.fx: TraceError" in message and "control flow" in message
    assert "torch.export: " in message and "data-dependent" in message
    assert "transformers.utils.fx: " in message
