"""Packed sequences (TrainingSpec.packed, `--packed`): Hugging Face's SDPA path materialises one bool document mask
per micro-batch (transformers 5.24.0 masking_utils.create_causal_mask / sdpa_mask); stacks that pass cu_seqlens or a
block mask hold no s x s tensor; SDPA with a mask leaves the flash backend."""

from __future__ import annotations

import json

import pytest

from frenzy_core.cli import main
from frenzy_core.gpus import CATALOG
from frenzy_core.memory import predict_memory
from frenzy_core.models import ModelSpec
from frenzy_core.perf import attention_kernel_tflops
from frenzy_core.training import Parallelism, TrainingSpec

# small enough that the mask is easy to count: s = 256, 2 samples per micro-batch
TINY = ModelSpec(name="tiny-llama", vocab_size=1000, hidden_size=64, num_layers=2, num_heads=4, ffn_size=128,
                 mlp_kind="swiglu", tie_embeddings=False, position_kind="rotary", max_positions=512,
                 norm_kind="rmsnorm", bias=False)
S, B = 256, 2


def _activations(framework: str, packed: bool, **fields) -> int:
    precision = {"hf": "amp", "megatron": "bf16-master"}.get(framework, "bf16")
    training = TrainingSpec(seq_len=S, global_batch=B, micro_batch=B, framework=framework, precision=precision,
                            packed=packed, **fields)
    return predict_memory(TINY, training, Parallelism()).activations_bytes


def test_hf_packed_rows_keep_one_bool_mask_per_sample_query_and_key():
    # sdpa_mask broadcasts packed_sequence_mask[batch_idx, q_idx] == packed_sequence_mask[batch_idx, kv_idx] to
    # (B, 1, S, S) bool: 2 x 256 x 256 x 1 B = 131,072 B, alive from the forward until the backward has run
    assert _activations("hf", True) - _activations("hf", False) == 131_072


@pytest.mark.parametrize("framework", ["pytorch", "megatron", "fsdp2", "torchtune"])
def test_stacks_that_pass_cu_seqlens_or_a_block_mask_hold_no_s_by_s_tensor(framework):
    assert _activations(framework, True) == _activations(framework, False)


def test_eager_attention_already_counts_its_mask_and_packing_adds_none():
    assert _activations("hf", True, attention="eager") == _activations("hf", False, attention="eager")


def test_hf_packed_attention_leaves_the_flash_kernel():
    a100 = CATALOG["A100-80GB"]
    plain = TrainingSpec(framework="hf", precision="amp", seq_len=4096, global_batch=8, micro_batch=1)
    packed = plain.model_copy(update={"packed": True})
    assert attention_kernel_tflops(plain, a100, 4096) is not None  # FlashAttention-2's A100 figure
    # with a bool attn_mask SDPA's flash backend is not eligible: memory-efficient attention, no published figure
    assert attention_kernel_tflops(packed, a100, 4096) is None
    # torchtune's flex attention / Megatron's THD keep their kernel figure
    titan = TrainingSpec(framework="fsdp2", seq_len=4096, global_batch=8, micro_batch=1, packed=True)
    assert attention_kernel_tflops(titan, a100, 4096) is not None


def test_packed_must_be_a_boolean():
    with pytest.raises(ValueError, match="packed"):
        TrainingSpec(packed="sometimes")


def test_cli_packed_flag_reaches_the_memory_model(capsys):
    args = ["memory", "--model", "gpt2", "--framework", "hf", "--seq-len", "512", "--micro-batch", "2", "--json"]
    assert main(args) == 0
    plain = json.loads(capsys.readouterr().out)["breakdown"]["activations"]
    assert main([*args, "--packed"]) == 0
    packed = json.loads(capsys.readouterr().out)["breakdown"]["activations"]
    assert packed - plain == 2 * 512 * 512  # B x S x S bool
