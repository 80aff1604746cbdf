"""Pedersen commitments and bit-proof verification in the 2048-bit RFC 3526 group: fast paths vs plain ``pow``.

* ``commit`` (comb tables for the fixed bases g, h) vs ``commit_ref`` (two ``pow``), full-size random exponents;
* ``verify_bit_proofs`` (one small-exponent batch: two multi-exponentiations) vs ``verify_bit_proofs_ref``
  (both equations of every proof), over N proofs;
* ``multi_exp`` (Straus, shared squarings) vs ``multi_exp_ref`` (one ``pow`` per base), 192-bit exponents as in
  the batch test.

The comb tables are built once, in the warm-up, as in a chapter run.
"""
from __future__ import annotations

import numpy as np

from paperkit.privacy_statistics import commitments as cm
from paperkit.timing import speed_ratio


def run(quick: bool) -> list[dict]:
    G = cm.modp2048_group()
    rng = np.random.default_rng(0)
    repeats = 3 if quick else 7
    rows = []

    n = 8 if quick else 40
    pairs = [(cm.random_scalar(G.q, rng), cm.random_scalar(G.q, rng)) for _ in range(n)]
    r = speed_ratio(lambda: [cm.commit(G, m, s) for m, s in pairs],
                    lambda: [cm.commit_ref(G, m, s) for m, s in pairs], repeats=repeats)
    rows.append({"kernel": "commit (comb tables)", "baseline": "commit_ref (pow)", "ratio": r.ratio,
                 "shape": f"{n} commitments, 2048-bit p", "work": f"{2 * n} exponentiations of 2047-bit exponents"})

    n = 16 if quick else 128
    cs, prs, ctxs = [], [], []
    for i in range(n):
        b, s = i % 2, cm.random_scalar(G.q, rng)
        cs.append(cm.commit(G, b, s))
        ctxs.append(f"bench|{i}".encode())
        prs.append(cm.prove_bit(G, cs[-1], b, s, ctxs[-1], rng))
    r = speed_ratio(lambda: cm.verify_bit_proofs(G, cs, prs, ctxs, rng),
                    lambda: cm.verify_bit_proofs_ref(G, cs, prs, ctxs, rng), repeats=repeats)
    rows.append({"kernel": "verify_bit_proofs (batched)", "baseline": "verify_bit_proofs_ref (one by one)",
                 "ratio": r.ratio, "shape": f"{n} OR proofs", "work": f"{4 * n} group equations checked"})

    n = 16 if quick else 128
    bases = [cm.signed(cm.random_scalar(G.p, rng) + 2, G.p) for _ in range(n)]
    exps = [int.from_bytes(rng.bytes(24), "big") for _ in range(n)]
    r = speed_ratio(lambda: cm.multi_exp(G, bases, exps), lambda: cm.multi_exp_ref(G, bases, exps),
                    repeats=repeats)
    rows.append({"kernel": "multi_exp (Straus)", "baseline": "multi_exp_ref (pow per base)", "ratio": r.ratio,
                 "shape": f"{n} bases, 192-bit exponents", "work": f"{n} exponentiations"})
    return rows


if __name__ == "__main__":
    for row in run(quick=False):
        print(row)
