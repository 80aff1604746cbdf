import math

import numpy as np
import pytest
import torch

from paperkit.sequence_models import output_heads as oh
from paperkit.sequence_models.circuit_rank import mixture_head


def test_floor_closed_form():
    assert oh.prob_head_floor(32, 8) == pytest.approx(math.log(4))
    assert oh.prob_head_floor(8, 8) == 0.0


@pytest.mark.parametrize("space", ["prob", "logit"])
def test_head_normalises(space):
    g = torch.Generator().manual_seed(0)
    head = oh.MixtureHead(5, 3, 7, space, g)
    lp = head(torch.randn(4, 6, 5, generator=g))
    assert lp.shape == (4, 6, 7)
    torch.testing.assert_close(lp.exp().sum(-1), torch.ones(4, 6), rtol=0, atol=1e-6)


def test_prob_head_is_the_numpy_mixture():
    g = torch.Generator().manual_seed(1)
    head = oh.MixtureHead(5, 3, 7, "prob", g)
    h = torch.randn(10, 5, generator=g, dtype=torch.float64)
    with torch.no_grad():
        Pi = torch.softmax(h @ head.gate.double(), -1).numpy()
        Phi = torch.softmax(head.table.double(), -1).numpy()
        got = head.double()(h).exp().numpy()
    np.testing.assert_allclose(got, mixture_head(Pi, Phi), atol=1e-12)


def test_prob_head_respects_floor_on_any_context_set():
    # the K/V cap: grouping contexts by target, mean target probability <= K / V for any gate and table
    g = torch.Generator().manual_seed(2)
    V, K = 12, 3
    for _ in range(5):
        head = oh.MixtureHead(4, K, V, "prob", g)
        with torch.no_grad():
            head.table.mul_(20)  # sharp components
            lp = head(torch.randn(V * 10, 4, generator=g) * 5)
        y = torch.arange(V).repeat(10)
        assert lp.exp()[torch.arange(V * 10), y].mean() <= K / V + 1e-6


def test_offset_copy_targets():
    x, y = oh.offset_copy_batch(torch.Generator().manual_seed(0), 3, 6, 10, 2)
    assert x.shape == (3, 6) and y.shape == (3, 4)
    assert torch.equal(y, x[:, :4])


def test_train_head_short_run():
    r = oh.train_head("linear", vocab=8, K=2, gen=torch.Generator().manual_seed(0), steps=5, d_model=8, n_eval=16)
    assert np.isfinite(r.nll) and 0 <= r.p_target <= 1


def test_bad_input():
    g = torch.Generator()
    with pytest.raises(ValueError, match="space"):
        oh.MixtureHead(4, 2, 5, "probability", g)
    with pytest.raises(ValueError, match="space"):
        oh.train_head("x", vocab=8, K=2, gen=g)
    with pytest.raises(ValueError, match="steps"):
        oh.train_head("prob", vocab=8, K=2, gen=g, steps=0)
    with pytest.raises(ValueError, match="offset"):
        oh.offset_copy_batch(g, 2, 4, 8, 4)
    with pytest.raises(ValueError, match="K"):
        oh.prob_head_floor(8, 0)
