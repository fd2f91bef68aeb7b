"""The run-time model's Gaussian helpers against float64 references."""

import torch

from bdsgd.runtime_model.gaussian import ASYMPTOTIC_BELOW, log_ndtr


def test_log_ndtr_matches_torchs_in_float64_with_finite_gradients():
    # both branches and the switch between them, from a censoring far above a component's mean
    # (z = -60) to one far below it (z = 12, where log Phi is -1e-33)
    z = torch.cat([torch.linspace(-60.0, 12.0, 20_001),
                   ASYMPTOTIC_BELOW + torch.tensor([-1e-3, 0.0, 1e-3])]).requires_grad_()
    value = log_ndtr(z)
    reference = torch.special.log_ndtr(z.detach().double())
    # float32 holds log Phi(-60) = -1804 to 1e-4; near z = 0 to 1e-7
    assert torch.allclose(value.double(), reference, rtol=2e-7, atol=2e-7)
    (grad,) = torch.autograd.grad(value.sum(), z)
    z64 = z.detach().double().requires_grad_()
    (grad64,) = torch.autograd.grad(torch.special.log_ndtr(z64).sum(), z64)
    assert torch.isfinite(grad).all()
    assert torch.allclose(grad.double(), grad64, rtol=1e-4, atol=1e-6)
