"""Looped transformers with fixed, sampled and learned loop counts: one-pass per-loop readout against re-running
the model per loop count, the halting distribution against its loop reference and closed forms, the per-sample
masked loop against running each sample alone, the window statistics on hand-made predictions, and bad input."""
import numpy as np
import pytest
import torch

from paperkit.sequence_models import looped_halting as lh
from paperkit.device import setup_torch

TOL = {torch.float32: dict(rtol=1e-5, atol=1e-6), torch.float64: dict(rtol=1e-12, atol=1e-13)}


@pytest.fixture(autouse=True, scope="module")
def torch_settings():
    """The chapters' Torch settings (flush-to-zero, PAPERKIT_THREADS threads): tiny models crawl without them."""
    setup_torch("cpu")


def model_and_batch(task, size, seed, d=16, n=8):
    model = lh.make_model(task, d, torch.Generator().manual_seed(seed))
    x, y, m = lh.task_batch(task, np.random.default_rng(seed), n, size)
    return model, x, y, m


@pytest.mark.parametrize("task,size", [("dyck1", 5), ("dyck1", 13), ("copy", 4), ("binary_add", 3)])
@pytest.mark.parametrize("seed", [0, 1])
def test_one_pass_per_loop_predictions_match_rerunning_the_model(task, size, seed):
    model, x, y, m = model_and_batch(task, size, seed)
    K = 2 * size
    with lh.BlockCounter(model) as one:
        fast = lh.per_loop_predictions(model, x, K)
    with lh.BlockCounter(model) as ref:
        slow = lh.per_loop_predictions_reference(model, x, K)
    assert fast.shape == (K,) + x.shape
    assert torch.equal(fast, slow)
    assert one.calls == lh.block_applications(K, one_pass=True) == K
    assert ref.calls == lh.block_applications(K, one_pass=False) == K * (K + 1) // 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(1, 1), (3, 2), (5, 9), (2, 25)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_halting_distribution_matches_reference_and_sums_to_one(dtype, shape, seed):
    z = 3 * torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)
    pi = lh.halting_distribution(z)
    torch.testing.assert_close(pi, lh.halting_distribution_reference(z), **TOL[dtype])
    torch.testing.assert_close(pi.sum(1), torch.ones(shape[0], dtype=dtype), **TOL[dtype])
    assert (pi >= 0).all()


def test_halting_distribution_closed_forms():
    # constant p: geometric pi_k = p (1 - p)^k, the remainder (1 - p)^(K-1) at the forced last halt
    p, K = 0.3, 6
    z = torch.full((1, K), float(np.log(p / (1 - p))), dtype=torch.float64)
    want = [p * (1 - p) ** k for k in range(K - 1)] + [(1 - p) ** (K - 1)]
    torch.testing.assert_close(lh.halting_distribution(z)[0], torch.tensor(want, dtype=torch.float64))
    # a certain halt at the first candidate
    assert lh.halting_distribution(torch.tensor([[50.0, 0.0, 0.0]], dtype=torch.float64))[0, 0] > 1 - 1e-12


def test_halting_gradient_matches_reference():
    z = torch.randn(4, 7, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    w = torch.randn(4, 7, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    a, b = z.clone().requires_grad_(True), z.clone().requires_grad_(True)
    (lh.halting_distribution(a) * w).sum().backward()
    (lh.halting_distribution_reference(b) * w).sum().backward()
    torch.testing.assert_close(a.grad, b.grad, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_per_sample_masked_loop_matches_running_each_sample_alone(seed):
    model, x, _, _ = model_and_batch("dyck1", 9, seed, n=6)
    T = torch.randint(0, 12, (6,), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        batched = model(x, n_loops=T)
        alone = torch.cat([model(x[i:i + 1], n_loops=int(T[i])) for i in range(6)])
    torch.testing.assert_close(batched, alone, rtol=1e-5, atol=1e-5)


def test_loop_counts_schedules():
    g = torch.Generator().manual_seed(0)
    assert torch.equal(lh.loop_counts("fixed", 7, 5, g), torch.full((5,), 7))
    for per_sample in (False, True):
        draws = torch.stack([lh.loop_counts("sampled", 5, 4, g, per_sample) for _ in range(400)])
        assert draws.min() == 5 and draws.max() == 10
        assert bool((draws.float().std(1) > 0).any()) == per_sample
    # uniform on {n..2n}: every value about equally often (chi-square-sized tolerance for 6 x 400 draws)
    counts = torch.bincount(torch.stack([lh.loop_counts("sampled", 5, 1, g) for _ in range(2400)]).ravel())[5:]
    assert (counts - 400).abs().max() < 80


def test_loop_window_stats_on_hand_made_predictions():
    n, targets, mask = 2, torch.tensor([[1, 0], [1, 1], [0, 0]]), torch.ones(3, 2, dtype=torch.bool)
    right, wrong = targets.clone(), 1 - targets
    # loops 1..4: sample 0 always right; sample 1 right only at T = 2; sample 2 always wrong (locked in)
    pred = torch.stack([torch.stack([right[0], wrong[1], wrong[2]]), torch.stack([right[0], right[1], wrong[2]]),
                        torch.stack([right[0], wrong[1], wrong[2]]), torch.stack([right[0], wrong[1], wrong[2]])])
    st = lh.loop_window_stats(pred, targets, mask, n)
    assert st["acc_at_n"] == pytest.approx(2 / 3)
    assert st["std_window"] == pytest.approx(np.std([2 / 3, 1 / 3, 1 / 3]))
    assert st["stable_frac"] == pytest.approx(2 / 3)
    assert st["stable_wrong_frac"] == pytest.approx(1.0)  # the one error at T = n is the locked-in sample
    st_halt = lh.loop_window_stats(pred, targets, mask, n, halt=torch.tensor([2, 3, 4]))
    assert st_halt["acc_halt"] == pytest.approx(1 / 3)
    assert st_halt["stable_wrong_frac"] == pytest.approx(0.5)


def test_training_lowers_the_loss_and_rl_halting_runs():
    for scheme in ("fixed", "sampled", "rl"):
        out = lh.train_and_evaluate("dyck1", scheme, d_model=16, steps=40, batch=16, lr=3e-3, train_len=(3, 5),
                                    id_lengths=[4], test_lengths=[7], n_eval=16, seed=0, max_restarts=0)
        assert out["curve"][-10:].mean() < out["curve"][:10].mean()
        assert set(out["stats"]) == {4, 7} and out["acc"][7].shape == (14,)
        assert 0 <= out["stats"][7]["acc_halt"] <= 1


def test_runs_below_the_training_length_target_are_restarted_and_the_last_try_is_kept():
    kw = dict(d_model=16, steps=10, batch=8, lr=3e-3, train_len=(3, 5), id_lengths=[4], test_lengths=[7], n_eval=8,
              seed=0, plateau_level=float("inf"))  # only the training-length target restarts here
    assert lh.train_and_evaluate("dyck1", "fixed", max_restarts=2, id_target=1.01, **kw)["restarts"] == 2
    assert lh.train_and_evaluate("dyck1", "fixed", max_restarts=2, id_target=0.0, **kw)["restarts"] == 0
    model = lh.make_model("dyck1", 16, torch.Generator().manual_seed(0))
    acc = lh.training_length_accuracy(model, "dyck1", [4, 6], 32, np.random.default_rng(5))
    rng, by_hand = np.random.default_rng(5), []
    for size in (4, 6):
        x, y, m = lh.task_batch("dyck1", rng, 32, size)
        by_hand.append(((model(x, n_loops=size).argmax(-1) == y) | ~m).all(-1).float().mean().item())
    assert acc == pytest.approx(np.mean(by_hand))


def test_policy_halting_loops_stay_in_the_window():
    model, x, _, _ = model_and_batch("dyck1", 6, 0)
    head = lh.HaltingHead(16, torch.Generator().manual_seed(0))
    T = lh.policy_halting_loops(model, head, x, 6)
    assert T.shape == (8,) and (T >= 6).all() and (T <= 12).all()


def test_plateau_check_abandons_a_stuck_run():
    model = lh.make_model("dyck1", 16, torch.Generator().manual_seed(0))
    out = lh.train_looped(model, "dyck1", "fixed", 20, 8, (3, 5), 1e-5, np.random.default_rng(0),
                          torch.Generator().manual_seed(0), plateau=(10, 0.0))
    assert out is None


def test_bad_input_is_rejected_with_the_parameter_named():
    g = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match="task"):
        lh.task_batch("parity", np.random.default_rng(0), 4, 5)
    with pytest.raises(ValueError, match="scheme"):
        lh.loop_counts("rl", 4, 2, g)
    with pytest.raises(ValueError, match="n and batch"):
        lh.loop_counts("fixed", 0, 2, g)
    with pytest.raises(ValueError, match="max_loops"):
        lh.per_loop_predictions(lh.make_model("dyck1", 16, g), torch.zeros(1, 4, dtype=torch.long), 0)
    with pytest.raises(ValueError, match="train_len"):
        lh.train_looped(lh.make_model("dyck1", 16, g), "dyck1", "fixed", 5, 4, (6, 3), 1e-3,
                        np.random.default_rng(0), g)
    with pytest.raises(ValueError, match="2n"):
        lh.loop_window_stats(torch.zeros(3, 2, 4, dtype=torch.long), torch.zeros(2, 4, dtype=torch.long),
                             torch.ones(2, 4, dtype=torch.bool), 2)
    with pytest.raises(ValueError, match="max_restarts"):
        lh.train_and_evaluate("dyck1", "fixed", d_model=16, steps=5, batch=4, lr=1e-3, train_len=(3, 4),
                              id_lengths=[3], test_lengths=[5], n_eval=4, seed=0, max_restarts=-1)
