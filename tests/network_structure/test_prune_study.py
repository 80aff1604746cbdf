"""paperkit.network_structure.prune_study: the digit preprocessing, the small MLP, and the per-layer study on a
synthetic layer where the answers are known (Wanda gains nothing, the hidden controls are found)."""
import numpy as np
import pytest
import torch

from paperkit.network_structure import prune_study as ps


def test_mnist16_pools_and_scales():
    X = np.zeros((2, 784))
    X[0, :] = 255.0
    X[1, 28 * 10 + 10] = 255.0                     # one pixel -> a quarter of one pooled cell
    out = ps.mnist16(X)
    assert out.shape == (2, 256)
    assert out[0].max() == 1.0 and out[0].min() == 0.0      # the 2-pixel padding stays blank
    assert out[1].sum() == pytest.approx(0.25)


def test_train_mlp_learns_a_separable_task_and_returns_the_documented_shapes():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 256))
    y = (X[:, 0] > 0).astype(int) + 2 * (X[:, 1] > 0).astype(int)
    W, b = ps.train_mlp(X, y, 32, torch.Generator().manual_seed(0), epochs=15)
    assert [w.shape for w in W] == [(32, 256), (256, 32), (32, 256), (256, 32), (10, 256)]
    assert ps.accuracy(W, b, X, y) > 0.8
    ins = ps.layer_inputs(W, b, X[:50])
    assert [x.shape[1] for x in ins] == [256, 32, 256, 32, 256]
    assert all((x >= 0).all() for x in ins[1:])


@pytest.fixture(scope="module")
def synthetic_layer():
    rng = np.random.default_rng(1)
    W = rng.normal(size=(48, 24))
    X_in = np.abs(rng.normal(size=(200, 24)))
    X_in[:, 0] = 0.0                               # one dead input
    return ps.layer_study(W, X_in, rng)


def test_layer_study_drops_dead_inputs_and_keeps_a_multiple_of_the_group(synthetic_layer):
    L = synthetic_layer
    assert L["shape"] == (48, 20) and L["dead_inputs"] == 4
    assert set(L["visible"]) == set(ps.MASKS)


def test_layer_study_finds_nothing_for_wanda_and_finds_the_hidden_controls(synthetic_layer):
    s = ps.summarise({"layers": [synthetic_layer] * 4})
    assert s["e1"] == 0 and s["e2"] == 0 and s["t1"] == 0 and s["t2"] == 0 and s["bound"] == 0
    assert s["e1_ctrl"] == pytest.approx(10 / 68)  # half of the 20 columns, over 48 + 20 lines
    assert s["t2_ctrl"] == 10
    assert s["group_recovery"] == 1.0


def test_uncut_wanda_with_a_zero_column_on_the_short_side_gains_one_row_more_than_dense():
    """A faint input that Wanda prunes in every row is a zero column of the short side: it lowers the rank by one,
    so the left singular basis zeroes one row more of the pruned than of the dense layer (Delta differs by 1/(n+m));
    the cut study (E2) sees no difference."""
    rng = np.random.default_rng(3)
    W = rng.normal(size=(48, 24))
    X_in = np.abs(rng.normal(size=(200, 24)))
    X_in[:, 5] *= 1e-4                              # live, but far fainter than every other input
    L = ps.layer_study(W, X_in, rng, matrices=("Wanda", ps.UNCUT, "hidden lines", "hidden groups", "row-shuffled Wanda"))
    assert L["shape"] == (48, 24) and L["visible"]["Wanda"] == pytest.approx(1 / 72)
    s = ps.summarise({"layers": [L]})
    assert s["e2u"] == pytest.approx(1 / 72) and s["e2u_where"] == (0, "SVD basis, left")
    assert s["e2"] == 0 and s["t1"] == 0 and s["bound"] == 0


def test_block_gain_counts_the_zeros_gathered_into_aligned_blocks():
    """Columns zero in the same rows, spread apart: the Hungarian grouping puts them in one aligned block."""
    rng = np.random.default_rng(4)
    W = rng.normal(size=(40, 16))
    X_in = np.abs(rng.normal(size=(100, 16))) + 0.5
    L = ps.layer_study(W, X_in, rng, matrices=("Wanda", "hidden lines", "hidden groups", "row-shuffled Wanda"))
    s = ps.summarise({"layers": [L]})
    assert 0 <= s["block_gain"] <= 1 and 0 <= s["block_gain_null"] <= 1
    Zc = np.zeros((6, 8), dtype=bool)
    Zc[:3, [0, 2, 4, 6]] = True                     # four columns zero in the first three rows, not adjacent
    perm = ps.pt.hungarian_group_perm(Zc, 4)
    assert ps.pt.zero_groups(Zc, 4) == 0 and ps.pt.zero_groups(Zc[:, perm], 4) == 3
