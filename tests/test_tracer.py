"""frenzy_core.tracer: fake tensors count what real tensors allocate; a traced step has the mechanisms we model."""

from __future__ import annotations

import subprocess
import sys

import pytest

from frenzy_core.errors import SpecError
from frenzy_core.models import ModelSpec
from frenzy_core.training import TrainingSpec

torch = pytest.importorskip("torch", reason="the tracer needs the optional torch extra (pip install '.[tracer]')")

from frenzy_core.tracer import round_to_block, trace_peak  # noqa: E402

TINY_GPT = ModelSpec(name="tiny-gpt", vocab_size=512, hidden_size=64, num_layers=2, num_heads=4, max_positions=128)
TINY_LLAMA = ModelSpec(
    name="tiny-llama", vocab_size=512, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, ffn_size=96,
    mlp_kind="swiglu", tie_embeddings=False, position_kind="rotary", norm_kind="rmsnorm", bias=False,
)


@pytest.mark.parametrize("model", [TINY_GPT, TINY_LLAMA], ids=lambda m: m.name)
@pytest.mark.parametrize("precision, attention, dropout", [("amp", "eager", 0.1), ("bf16-master", "flash", 0.0)])
def test_fake_tensor_peak_equals_real_tensor_peak_byte_for_byte(model, precision, attention, dropout):
    training = TrainingSpec(seq_len=64, global_batch=4, micro_batch=2, precision=precision, attention=attention,
                            dropout=dropout)
    fake, real = trace_peak(model, training), trace_peak(model, training, fake=False)
    assert fake.peak_bytes == real.peak_bytes
    assert fake.peak_phase == real.peak_phase


def test_amp_step_holds_at_least_twenty_bytes_per_parameter():
    # 4 fp32 param + 4 grad + 8 Adam moments + 4 foreach temporary inside optimizer.step()
    # (docs/memory.md, "The peak moves")
    model = ModelSpec(name="gpt-small", vocab_size=4096, hidden_size=256, num_layers=4, num_heads=4, max_positions=128)
    result = trace_peak(model, TrainingSpec(seq_len=32, global_batch=1, precision="amp", optimizer="adamw"))
    assert result.peak_bytes >= 20 * model.parameter_count()
    assert result.peak_phase == "step1:optimizer-step"
    assert result.steps == 2 and result.torch_version == torch.__version__


def test_eager_attention_stores_more_than_flash():
    eager = TrainingSpec(seq_len=128, global_batch=4, micro_batch=4, precision="amp", attention="eager")
    flash = eager.model_copy(update={"attention": "flash"})
    assert trace_peak(TINY_GPT, eager).peak_bytes > trace_peak(TINY_GPT, flash).peak_bytes


def test_blocks_round_up_to_512_bytes():
    assert [round_to_block(n) for n in (0, 1, 512, 513)] == [0, 512, 512, 1024]


def test_unsupported_setups_are_spec_errors():
    moe = TINY_LLAMA.model_copy(update={"num_experts": 4})
    with pytest.raises(SpecError) as err:
        trace_peak(moe, TrainingSpec(seq_len=32, global_batch=1))
    assert err.value.field == "model"
    with pytest.raises(SpecError) as err:
        trace_peak(TINY_GPT, TrainingSpec(seq_len=32, global_batch=1, zero_stage=1))
    assert err.value.field == "training"


def test_module_imports_without_torch():
    code = "import sys; sys.modules['torch'] = None; import frenzy_core.tracer as t; print(t.ALLOCATOR_BLOCK_BYTES)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "512"
