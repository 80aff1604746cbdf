import time

import numpy as np
import pytest
import torch

from paperkit import provenance
from paperkit.seeding import seed_everything, spawn
from paperkit.timing import speed_ratio


def test_seed_everything_gives_reproducible_explicit_generators():
    a, ta = seed_everything(5)
    b, tb = seed_everything(5)
    assert a.random() == b.random()
    assert torch.equal(torch.rand(3, generator=ta), torch.rand(3, generator=tb))
    kids = spawn(np.random.default_rng(1), 3)
    assert len({k.random() for k in kids}) == 3


def test_speed_ratio_sees_a_slower_baseline():
    r = speed_ratio(lambda: time.sleep(0.002), lambda: time.sleep(0.010), repeats=5)
    assert 2.0 < r.ratio < 20.0  # sleep has ~0.1 ms jitter; the true ratio is 5
    with pytest.raises(ValueError, match="repeats"):
        speed_ratio(lambda: None, lambda: None, repeats=0)


def test_lib_hash_is_stable_and_root_found():
    assert provenance.lib_hash() == provenance.lib_hash() and len(provenance.lib_hash()) == 16
    assert (provenance.repo_root() / "_toc.yml").exists()
    assert provenance.package_versions()["numpy"] == np.__version__


def test_plot_table_renders_escaped_html_rows_and_refuses_ragged_rows():
    import pytest

    from paperkit import plot
    out = plot.table(["a", "b<c"], [[1, "x&y"], [2.5, None]]).data
    assert out.count("<tr>") == 3 and "<th>b&lt;c</th>" in out and "<td>x&amp;y</td>" in out
    assert "|" not in out
    with pytest.raises(ValueError, match="row 1 has 1 cells"):
        plot.table(["a", "b"], [[1, 2], [3]])
