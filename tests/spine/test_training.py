"""AdamCosine: the same parameters as the plain Adam + cosine schedule + clipping loop it replaces."""
import pytest
import torch

from paperkit.training import AdamCosine


def net(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)).double()


def data():
    g = torch.Generator().manual_seed(3)
    return torch.randn(32, 4, generator=g, dtype=torch.float64), torch.randn(32, 1, generator=g, dtype=torch.float64)


@pytest.mark.parametrize("clip", [None, 0.05])
def test_matches_the_plain_loop_exactly(clip):
    x, y = data()
    a, b = net(0), net(0)
    opt_a = AdamCosine(a.parameters(), 0.05, 10, clip=clip)
    opt_b = torch.optim.Adam(b.parameters(), lr=0.05)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt_b, 10)
    for _ in range(10):
        got = opt_a.step(((a(x) - y) ** 2).mean())
        loss = ((b(x) - y) ** 2).mean()
        opt_b.zero_grad()
        loss.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(b.parameters(), clip)
        opt_b.step()
        sched.step()
        assert got == loss.item()
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.equal(pa, pb)
    assert opt_a.opt.param_groups[0]["lr"] == pytest.approx(0.0, abs=1e-12)  # cosine reaches 0 after `steps`


def test_clipping_only_the_given_parameters():
    x, y = data()
    a, head = net(0), torch.nn.Linear(1, 1).double()
    opt = AdamCosine(list(a.parameters()) + list(head.parameters()), 0.1, 5, clip=1e-6, clip_params=a.parameters())
    opt.step(((head(a(x)) - y) ** 2).mean())
    total = torch.sqrt(sum((p.grad ** 2).sum() for p in a.parameters()))
    assert total <= 1e-6 * (1 + 1e-6)
    assert torch.sqrt(sum((p.grad ** 2).sum() for p in head.parameters())) > 1e-3


@pytest.mark.parametrize("kw, msg", [({"lr": 0.0}, "lr must be > 0"), ({"steps": 0}, "steps >= 1"),
                                     ({"clip": -1.0}, "clip must be > 0")])
def test_bad_settings_are_rejected(kw, msg):
    with pytest.raises(ValueError, match=msg):
        AdamCosine(net(0).parameters(), **{"lr": 0.1, "steps": 5, **kw})
