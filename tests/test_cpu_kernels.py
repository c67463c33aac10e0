"""CPU training kernels: the RMSNorm swap computes the shipped model's numbers, and never outlives its block."""

from __future__ import annotations

import pytest
import torch
from conftest import QWEN3_BLOCK, tiny_model
from safetensors.torch import load_file

from minigpt.model.modeling_minigpt import MiniGPTRMSNorm
from minigpt.training.cpu_kernels import CPUTrainingRMSNorm, cpu_training_kernels


def norm_classes(model: torch.nn.Module) -> set[type]:
    return {type(module) for module in model.modules() if isinstance(module, MiniGPTRMSNorm)}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_swapped_norm_has_the_plain_forward_and_its_gradients(dtype):
    generator = torch.Generator().manual_seed(5)
    plain, swapped = MiniGPTRMSNorm(48, eps=1e-5), MiniGPTRMSNorm(48, eps=1e-5)
    with torch.no_grad():
        plain.weight.normal_(generator=generator)  # not ones, so the weight's place in the formula shows
        swapped.weight.copy_(plain.weight)
    x = (3 * torch.randn(4, 9, 48, generator=generator)).to(dtype)
    grad = torch.randn(4, 9, 48, generator=generator)
    results = []
    with cpu_training_kernels(swapped, enabled=True):
        assert type(swapped) is CPUTrainingRMSNorm
        for norm in (swapped, plain):
            inputs = x.clone().requires_grad_()
            out = norm(inputs)
            out.backward(grad.to(out.dtype))
            results.append((out, inputs.grad, norm.weight.grad))
    (out, dx, dw), (ref_out, ref_dx, ref_dw) = results
    assert "RMSNormFunction" in type(out.grad_fn).__name__  # the hand-written backward ran
    assert out.dtype == ref_out.dtype and dx.dtype == dtype and dw.dtype == torch.float32
    torch.testing.assert_close(out, ref_out, rtol=0, atol=0)  # the forward is the same arithmetic
    tolerance = 1e-5 if dtype == torch.float32 else 2e-2  # bf16: autograd rounds dy to bf16 first
    torch.testing.assert_close(dx.float(), ref_dx.float(), rtol=tolerance, atol=tolerance)
    torch.testing.assert_close(dw, ref_dw, rtol=1e-5, atol=1e-4)
    with torch.no_grad(), cpu_training_kernels(swapped, enabled=True):  # without grad: the parent's forward
        torch.testing.assert_close(swapped(x), plain(x), rtol=0, atol=0)


def test_a_model_trains_to_the_same_gradients_inside_the_block_and_gets_its_classes_back():
    model = tiny_model(**QWEN3_BLOCK).train()  # 2 norms per block, QK-norm's 2, the final one
    ids = torch.randint(2, 300, (2, 12), generator=torch.Generator().manual_seed(1))
    model(ids, labels=ids).loss.backward()
    plain = {name: param.grad.clone() for name, param in model.named_parameters()}
    model.zero_grad()
    with cpu_training_kernels(model, enabled=True) as inside:
        assert inside is model and norm_classes(model) == {CPUTrainingRMSNorm}
        assert sum(type(m) is CPUTrainingRMSNorm for m in model.modules()) == 2 * 4 + 1
        model(ids, labels=ids).loss.backward()
    assert norm_classes(model) == {MiniGPTRMSNorm}
    for name, param in model.named_parameters():
        torch.testing.assert_close(param.grad, plain[name], rtol=1e-4, atol=1e-6, msg=name)
    with cpu_training_kernels(model, enabled=False):  # off: nothing changes
        assert norm_classes(model) == {MiniGPTRMSNorm}


def test_the_classes_come_back_when_the_block_raises_and_only_the_exact_class_is_swapped():
    class OtherNorm(MiniGPTRMSNorm):  # someone's subclass: its forward is its own, left alone
        pass

    model = tiny_model(**QWEN3_BLOCK)
    model.transformer.ln_f = OtherNorm(32, eps=1e-5)
    with pytest.raises(RuntimeError, match="stopped"), cpu_training_kernels(model, enabled=True):
        assert type(model.transformer.ln_f) is OtherNorm
        assert type(model.transformer.h[0].ln_1) is CPUTrainingRMSNorm
        raise RuntimeError("stopped")
    assert type(model.transformer.ln_f) is OtherNorm
    assert norm_classes(model) == {MiniGPTRMSNorm, OtherNorm}


def test_a_model_saved_inside_the_block_is_the_shipped_model(tmp_path):
    model = tiny_model(**QWEN3_BLOCK)
    model.save_pretrained(tmp_path / "outside")
    with cpu_training_kernels(model, enabled=True):
        model.save_pretrained(tmp_path / "inside")
    outside, inside = tmp_path / "outside", tmp_path / "inside"
    assert sorted(p.name for p in inside.iterdir()) == sorted(p.name for p in outside.iterdir())
    for name in ("modeling_minigpt.py", "configuration_minigpt.py", "config.json"):
        assert (inside / name).read_bytes() == (outside / name).read_bytes(), name
    for path in inside.glob("*.py"):  # the remote code never names the training stage
        assert "cpu_kernels" not in path.read_text() and "CPUTraining" not in path.read_text()
    weights, reference = load_file(inside / "model.safetensors"), load_file(outside / "model.safetensors")
    assert weights.keys() == reference.keys()
    assert all(torch.equal(weights[key], reference[key]) for key in weights)
