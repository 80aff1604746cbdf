"""Byte-patch models with scratchpads: batched paths against per-byte reference loops, entropy against Torch's
Categorical, causality by perturbation, and the exact counts (steps, KV entries, FLOPs) against direct counting."""
import math

import numpy as np
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from paperkit.sequence_models import byte_patch as bp
from paperkit.nn.tiny_transformer import Block

TOL = {torch.float32: dict(rtol=1e-4, atol=1e-5), torch.float64: dict(rtol=1e-10, atol=1e-11)}


def make(P, seed, dtype=torch.float32, K=4, d=16, n_local=1):
    cfg = bp.PatchConfig(patch=P, d_model=d, n_heads=2, n_global=2, n_local=n_local, max_len=K * P)
    model = bp.PatchLM(cfg, torch.Generator().manual_seed(seed)).to(dtype).eval()
    with torch.no_grad():  # larger weights than the N(0, 0.02) init, so that every path matters numerically
        for p in model.parameters():
            p.mul_(10.0 if p.dim() > 1 else 1.0)
    return model


def rand_bytes(b, n, seed):
    return torch.randint(0, 256, (b, n), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("b,K,P,d", [(1, 1, 2, 1), (2, 3, 4, 8), (3, 5, 8, 6)])
@pytest.mark.parametrize("seed", [0, 1])
def test_patch_pool_matches_the_loop(dtype, b, K, P, d, seed):
    g = torch.Generator().manual_seed(seed)
    table = torch.randn(P, 256, d, generator=g, dtype=dtype)
    x = rand_bytes(b, K * P, seed)
    out = bp.patch_pool(x, table)
    assert out.shape == (b, K, P, d) and out.dtype == dtype
    torch.testing.assert_close(out, bp.patch_pool_ref(x, table), **TOL[dtype])


def test_patch_pool_rejects_bad_input():
    table = torch.zeros(4, 256, 3)
    with pytest.raises(ValueError, match="multiple of the patch size"):
        bp.patch_pool(torch.zeros(1, 6, dtype=torch.int64), table)
    with pytest.raises(ValueError, match="byte values"):
        bp.patch_pool(torch.full((1, 4), 256, dtype=torch.int64), table)
    with pytest.raises(ValueError, match="int64"):
        bp.patch_pool(torch.zeros(1, 4), table)
    with pytest.raises(ValueError, match="table"):
        bp.patch_pool(torch.zeros(1, 4, dtype=torch.int64), torch.zeros(4, 255, 3))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("scale", [0.01, 1.0, 30.0])
def test_entropy_equals_categorical(dtype, scale):
    logits = scale * torch.randn(5, 7, 256, generator=torch.Generator().manual_seed(3), dtype=dtype)
    logits[0, 0, :200] = -math.inf  # zero-probability bytes contribute 0 (p log p -> 0)
    ref = torch.distributions.Categorical(logits=logits).entropy() / math.log(2)
    torch.testing.assert_close(bp.entropy_bits(logits), ref.float(), rtol=1e-5, atol=1e-5)
    assert float(bp.entropy_bits(torch.zeros(256))) == pytest.approx(8.0, abs=1e-5)  # uniform over bytes: 8 bits


def test_entropy_trigger_thresholds_and_nests():
    h = torch.rand(3, 4, 8, generator=torch.Generator().manual_seed(0)) * 8
    taus = [-math.inf, 0.0, 2.0, 5.0, 7.9, math.inf]
    fired = [bp.entropy_trigger(h, t) for t in taus]
    assert fired[0].all() and not fired[-1].any()
    assert torch.equal(fired[2], h[..., 1:] > 2.0)
    for lo, hi in zip(fired, fired[1:]):
        assert not (hi & ~lo).any()  # raising tau only removes scratchpads
    with pytest.raises(ValueError, match="tau"):
        bp.entropy_trigger(h, float("nan"))
    with pytest.raises(ValueError, match="h_stale"):
        bp.entropy_trigger(h[..., :1], 1.0)


@pytest.mark.parametrize("seed", range(4))
def test_context_source_matches_a_loop(seed):
    fired = torch.rand(2, 3, 7, generator=torch.Generator().manual_seed(seed)) < 0.3
    src = bp.context_source(fired)
    for b in range(2):
        for k in range(3):
            for j in range(8):
                expect = max([i for i in range(j) if fired[b, k, i]], default=-1)
                assert src[b, k, j] == expect


@pytest.mark.parametrize("K,P", [(1, 2), (3, 4), (4, 3)])
def test_scratch_mask_matches_its_definition(K, P):
    m = bp.scratch_mask(K, P)
    S = K * (P - 1)
    for q in range(K + S):
        for k in range(K + S):
            if q < K:
                expect = k < K and k <= q
            else:
                kq = (q - K) // (P - 1)
                expect = (k < K and k < kq) or k == q
            assert bool(m[q, k]) == expect, (q, k)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("P,K,n_local", [(2, 3, 1), (4, 4, 1), (8, 2, 2)])
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("p", [0.0, 0.4, 1.0])
def test_batched_scratchpad_path_equals_the_per_offset_loop(dtype, P, K, n_local, seed, p):
    """The teacher-forced training path (all scratchpads in one masked pass) against the plain loop."""
    model = make(P, seed, dtype, K=K, n_local=n_local)
    x = rand_bytes(2, K * P, seed + 10)
    fired = torch.rand(2, K, P - 1, generator=torch.Generator().manual_seed(seed)) < p
    with torch.no_grad():
        out = model(x, fired)
    ref = bp.score_ref(model, x, fired=fired)
    torch.testing.assert_close(out, ref["logits"].to(dtype), **TOL[dtype])
    c = bp.counts(fired, P, x.numel())
    for k in ("global_steps", "local_steps", "kv_global", "kv_bytelevel"):
        assert ref[k] == c[k], k
    assert torch.equal(ref["fired"], fired)


def test_no_scratchpad_path_equals_all_unfired():
    model = make(4, 2)
    x = rand_bytes(3, 16, 2)
    with torch.no_grad():
        torch.testing.assert_close(model(x), model(x, torch.zeros(3, 4, 3, dtype=torch.bool)), **TOL[torch.float32])


@pytest.mark.parametrize("tau", [-math.inf, 7.0, 7.7, 7.9, math.inf])
@pytest.mark.parametrize("seed", [0, 1])
def test_entropy_triggered_scoring_equals_the_byte_by_byte_loop(tau, seed):
    model = make(4, seed, torch.float64, K=4)
    x = rand_bytes(2, 16, seed)
    fast = bp.score(model, x, tau)
    ref = bp.score_ref(model, x, tau=tau)
    torch.testing.assert_close(fast["logits"], ref["logits"].double(), **TOL[torch.float64])
    assert torch.equal(fast["fired"], ref["fired"])
    for k in ("global_steps", "local_steps", "kv_global", "kv_bytelevel"):
        assert fast[k] == ref[k], k
    assert fast["kv_global"] * 4 == fast["kv_bytelevel"] == x.numel()


def _first_changed(logits_a, logits_b):
    diff = (logits_a - logits_b).abs().amax(-1)[0]
    changed = torch.nonzero(diff > 0)
    return int(changed.min()) if changed.numel() else None


@pytest.mark.parametrize("n", [0, 5, 7, 8, 13, 31])
def test_causality_by_perturbation(n):
    """Changing byte n leaves every prediction at positions <= n untouched (no byte sees itself or the future)."""
    P, K = 8, 4
    model = make(P, 3, torch.float64, K=K)
    byte = bp.ByteLM(16, 2, 2, K * P, torch.Generator().manual_seed(4)).double().eval()
    x = rand_bytes(1, K * P, 5)
    y = x.clone()
    y[0, n] = (x[0, n] + 1 + torch.randint(0, 254, (1,), generator=torch.Generator().manual_seed(n))) % 256
    fired = torch.ones(1, K, P - 1, dtype=torch.bool)
    with torch.no_grad():
        pairs = {"byte-level": (byte(x), byte(y)), "stale": (model(x), model(y)),
                 "all scratchpads": (model(x, fired), model(y, fired)),
                 "entropy trigger": (bp.score(model, x, 7.95)["logits"], bp.score(model, y, 7.95)["logits"])}
    for name, (a, b) in pairs.items():
        first = _first_changed(a, b)
        assert first is None or first > n, f"{name}: prediction {first} changed when byte {n} did"
    if n < K * P - 1:  # and the change does reach a later prediction (the check could fail)
        assert _first_changed(*pairs["all scratchpads"]) == n + 1


def test_stale_context_ignores_the_current_patch_but_scratchpads_do_not():
    """Patch lag itself: without scratchpads the global context of patch k is blind to patch k's bytes."""
    P, K = 4, 3
    model = make(P, 6, torch.float64, K=K)
    x = rand_bytes(1, K * P, 7)
    y = x.clone()
    y[0, 4] = (x[0, 4] + 1) % 256  # byte 0 of patch 1
    with torch.no_grad():
        g_x, sp_x = model.global_states(x, scratch=True)
        g_y, sp_y = model.global_states(y, scratch=True)
    assert torch.equal(g_x[:, 0], g_y[:, 0])  # the state patch 1 reads (stale) does not see byte 4
    assert not torch.allclose(sp_x[:, 1, 0], sp_y[:, 1, 0])  # the scratchpad after byte 4 does
    torch.testing.assert_close(sp_x[:, 0], sp_y[:, 0])  # scratchpads of patch 0 do not


@pytest.mark.parametrize("budget", [0.125, 0.3, 0.5, 1.0])
def test_tau_for_budget_never_overspends(budget):
    h = torch.rand(4, 8, 8, generator=torch.Generator().manual_seed(1)) * 8
    tau = bp.tau_for_budget(h, budget)
    fired = bp.entropy_trigger(h, tau)
    steps = bp.counts(fired, 8, h.numel())["global_steps"] / h.numel()
    assert steps <= budget + 1e-12
    assert steps > budget - 1 / h.numel() - 1e-12  # and spends all but less than one step of it
    with pytest.raises(ValueError, match="steps_per_byte"):
        bp.tau_for_budget(h, 0.1)


def test_random_trigger_fires_exactly_n():
    like = torch.zeros(3, 5, 7, dtype=torch.bool)
    f = bp.random_trigger(like, 40, torch.Generator().manual_seed(0))
    assert f.shape == like.shape and int(f.sum()) == 40
    with pytest.raises(ValueError, match="n_fire"):
        bp.random_trigger(like, 200, torch.Generator())


@pytest.mark.parametrize("d,L", [(8, 1), (16, 5), (48, 32)])
def test_block_flops_equal_torch_flop_counter(d, L):
    from paperkit.nn.tiny_transformer import TinyConfig

    blk = Block(TinyConfig(vocab=256, d_model=d, n_heads=2, pos="none"))
    with FlopCounterMode(display=False) as fc:
        blk(torch.randn(1, L, d))
    assert fc.get_total_flops() == bp.block_flops(d, L)


@pytest.mark.parametrize("d,L", [(16, 8), (48, 32)])
def test_byte_model_flops_per_byte(d, L):
    """linear_flops is the per-byte matmul cost of the byte-level model: total = L * linear + attention."""
    m = bp.ByteLM(d, 2, 2, L, torch.Generator().manual_seed(0))
    with FlopCounterMode(display=False) as fc:
        m(rand_bytes(1, L, 0))
    assert fc.get_total_flops() == L * bp.linear_flops(d, 2, bp.VOCAB + 1) + 2 * 4 * L * L * d


def test_patch_flops_follow_the_counts():
    cfg = bp.PatchConfig(patch=4, d_model=16, max_len=16)
    f = bp.patch_flops_per_byte(cfg, global_steps=8, local_steps=20, n_bytes=16)
    assert f["global"] == 8 * (2 * 24 * 256 + 2 * 256) / 16
    assert f["local"] == 20 * (24 * 256 + 2 * 16 * 256) / 16
    assert f["total"] == f["global"] + f["local"]


def test_config_and_training_validation():
    with pytest.raises(ValueError, match="max_len"):
        bp.PatchConfig(patch=3, max_len=16)
    with pytest.raises(ValueError, match="patch"):
        bp.PatchConfig(patch=1, max_len=16)
    with pytest.raises(ValueError, match="divisible"):
        bp.PatchConfig(d_model=15, n_heads=2)
    model = make(4, 0, K=2)
    data = np.frombuffer(b"def f(x):\n    return x + 1\n" * 40, dtype=np.uint8)
    with pytest.raises(ValueError, match="p_fire"):
        bp.train(model, data, 2, 2, 8, 1e-3, np.random.default_rng(0), p_fire=1.5)
    with pytest.raises(ValueError, match="give exactly one"):
        bp.score_ref(model, rand_bytes(1, 8, 0))
    with pytest.raises(ValueError, match="max_len"):
        model(rand_bytes(1, 16, 0))


def test_training_lowers_the_loss_on_repetitive_bytes():
    cfg = bp.PatchConfig(patch=4, d_model=16, max_len=16)
    model = bp.PatchLM(cfg, torch.Generator().manual_seed(0))
    data = np.frombuffer(b"def f(x):\n    return x + 1\n" * 40, dtype=np.uint8)
    curve = bp.train(model, data, 40, 4, 16, 1e-2, np.random.default_rng(0), p_fire="uniform")
    assert len(curve) == 40 and np.mean(curve[-10:]) < np.mean(curve[:10]) - 1.0


def test_seed_metrics_agree_with_direct_scoring():
    cfg = bp.PatchConfig(patch=4, d_model=16, n_heads=2, n_global=1, n_local=1, max_len=16)
    net_c = bp.PatchLM(cfg, torch.Generator().manual_seed(0))
    net_b = bp.PatchLM(cfg, torch.Generator().manual_seed(1))
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.integers(0, 256, size=(3, 16)))
    x_cal = torch.from_numpy(rng.integers(0, 256, size=(4, 16)))
    m = bp.seed_metrics(net_c, net_b, x, x_cal, 0.5, torch.Generator().manual_seed(2))
    with torch.no_grad():
        stale = bp.bits_per_byte(bp.score(net_c, x, math.inf)["logits"], x).mean().item()
        fresh = bp.bits_per_byte(bp.score(net_c, x, -math.inf)["logits"], x).mean().item()
        b = bp.bits_per_byte(net_b(x), x).mean().item()
    assert m["stale"] == pytest.approx(stale) and m["fresh"] == pytest.approx(fresh) and m["b"] == pytest.approx(b)
    assert m["gap"].shape == (4,) and m["gap"][0] == pytest.approx(0.0, abs=1e-6)
    assert m["n_bytes"] == 48 and m["global_steps"] >= 48 // 4
    assert m["tau"] == bp.tau_for_budget(bp.score(net_c, x_cal, math.inf)["h_stale"], 0.5)
