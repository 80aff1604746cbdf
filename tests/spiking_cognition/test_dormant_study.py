"""paperkit.spiking_cognition.dormant_study: the pieces of the chapter's experiment on small hand-made inputs."""
import math

import numpy as np
import torch

from paperkit.spiking_cognition import dormant_study as ds


def test_rate_code_density_and_denser_code():
    p = torch.full((200, 50), 0.2)
    g = torch.Generator().manual_seed(0)
    x1, x2 = ds.rate_code(p, 20, g), ds.rate_code(p, 20, g, draws=2)
    assert x1.shape == (20, 200, 50) and set(x1.unique().tolist()) <= {0.0, 1.0}
    assert abs(float(x1.mean()) - 0.2) < 0.01 and abs(float(x2.mean()) - 0.36) < 0.01


def test_inhibition_stats_on_a_hand_made_trace():
    # one neuron, T = 4: u = (-1, -1, -1, -1) never fires; another: u = (-0.2, 2, 0, 0) fires at t = 1
    u = torch.tensor([[[-1.0, -0.2]], [[-1.0, 2.0]], [[-1.0, 0.0]], [[-1.0, 0.0]]])
    s = (u > 1).double()
    st = ds.inhibition_stats(u, s, 0.5)
    assert st["deep"] == 0.5
    assert st["p_later_deep"] == 0.0 and st["p_later_mild"] == 1.0
    assert math.isclose(st["p_later_all"], 1 / 6)


def test_magnitude_prune_removes_the_smallest_outgoing_norms():
    net = ds.LIFNet(6, 10, torch.Generator().manual_seed(0))
    with torch.no_grad():
        net.fc2.weight.copy_(torch.arange(10.0).repeat(10, 1))
    p = ds.magnitude_prune(net, 0.3)
    assert p.mask1.tolist() == [0.0] * 3 + [1.0] * 7 and net.mask1.sum() == 10
    assert p.mask2.sum() == 7


def test_gate_off_network_equals_plain_and_pruned_energy_drops():
    g = torch.Generator().manual_seed(1)
    X = torch.rand(64, 12, generator=g)
    y = torch.randint(0, 10, (64,), generator=g)
    net = ds.LIFNet(12, 16, torch.Generator().manual_seed(2))
    e0 = ds.evaluate(net, X, y, 6, torch.Generator().manual_seed(3))
    e1 = ds.evaluate(net, X, y, 6, torch.Generator().manual_seed(3), theta_d=math.inf)
    assert e0["energy"] == e1["energy"] and e0["acc"] == e1["acc"]
    e2 = ds.evaluate(ds.magnitude_prune(net, 0.5), X, y, 6, torch.Generator().manual_seed(3))
    assert e2["upd"] < e0["upd"] and e2["energy"] < e0["energy"]


def test_instance_share_and_event_driven_saving():
    a = torch.ones(3, 4, 2)
    a[1:, :2, 0] = 0  # neuron 0 asleep for half the inputs
    a[1:, :, 1] = 0   # neuron 1 asleep for all
    st = ds.instance_share((a,))
    assert st["varies"] == 0.5 and st["always"] == 0.5
    x = torch.zeros(2, 1, 3)
    x[0, 0, 0] = 1
    assert ds.event_driven_saving(x, np.eye(3)) == 1 - 1 / 6
