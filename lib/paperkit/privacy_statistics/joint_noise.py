"""Dealer-free generation of one shared binomial noise draw by k mutually distrustful provers (a miniature).

Our construction, not the paper's (the abstract does not describe its joint generation). It runs in the RFC 3526
group of :mod:`paperkit.privacy_statistics.commitments` and uses threshold exponential ElGamal, i.e. a Pedersen
commitment ``g^m y^r`` whose second base is the provers' joint key ``y = prod_j y_j`` (``y_j = g^{x_j}``, the secret
``x = sum_j x_j`` additively shared), together with the tag ``g^r``: ``E = (a, b) = (g^r, g^m y^r)``. Nobody can open
``E`` alone; all k provers together decrypt ``g^m = b / prod_j a^{x_j}``.

Noise. Each of the ``n_bits`` slots starts as ``E = (1, g)`` (``m = +1``). Prover ``j = 0, ..., k-1`` in turn
replaces ``E`` by a re-randomised copy of ``E`` (sign ``s_j = 0``) or of ``E^{-1}`` (``s_j = 1``, which negates
``m``), and proves with a Sigma-OR of two Chaum-Pedersen proofs that it did one of the two. The slot ends with
``m_l = prod_j (-1)^{s_j}`` = +-1, i.e. the XOR of the provers' secret bits: if one prover draws its bit fairly, the
slot is a fair coin whatever the others do, since each sees only freshly re-randomised ciphertexts. The noise
``Z = sum_l (1 - m_l) / 2 - n_bits / 2 = -sum_l m_l / 2`` is one ``Binomial(n_bits, 1/2) - n_bits / 2`` draw.

Count. Client ``i`` encrypts its bit under ``y`` with a bit proof (the same Sigma-OR). The provers decrypt
``prod_i E_i^2 / prod_l E_l`` jointly (one Chaum-Pedersen proof each), which opens ``g^M`` with
``M = 2 count + 2 Z``; the verifier finds ``M`` in a table of the few possible values and releases ``M / 2``.

Keys carry a Schnorr proof of knowledge of ``x_j``: without it the last prover can publish
``y_k = g^{x'} / prod_{j<k} y_j`` and decrypt everything alone (the "rogue key" tampering).

Proofs are Fiat-Shamir with 128-bit SHA-256 challenges bound to the group, the session and the statement; scalars
are full size mod q. Verification here is the plain one, proof by proof (no fast twin, so no reference twin).
Randomness comes from an explicit ``numpy.random.Generator`` (reproducible, not cryptographic).
"""
from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass
from typing import Callable

import numpy as np

from paperkit.privacy_statistics.commitments import CHALLENGE_BITS, Group, _enc, random_scalar, signed

_E = 2**CHALLENGE_BITS


def _inv(G: Group, x: int) -> int:
    return signed(pow(x, -1, G.p), G.p)


def _prod(G: Group, elems) -> int:
    acc = 1
    for e in elems:
        acc = G.mul(acc, e)
    return acc


def _ypow(G: Group, y: int, e: int) -> int:
    """``y^e`` through y's comb table when one was built (big runs), else plain ``pow``."""
    return G.fixed_pow(y, e) if y in G._tables else G.pow(y, e)


def _hash(G: Group, tag: bytes, *vals: int) -> int:
    data = b"paperkit joint noise|" + G.digest() + len(tag).to_bytes(4, "big") + tag
    return int.from_bytes(hashlib.sha256(data + b"".join(_enc(v) for v in vals)).digest()[:16], "big")


@dataclass(frozen=True)
class Ciphertext:
    """``(a, b) = (g^r, g^m y^r)``: both signed residues in ``[1, q]``."""

    a: int
    b: int


@dataclass(frozen=True)
class OrProof:
    """Sigma-OR: for one ``i`` in {0, 1}, ``(A_i, B_i) = (g^w, y^w)`` for a known ``w``; ``t`` the commitments,
    ``e`` the branch challenges (``e_0 + e_1 = H mod 2^128``), ``z`` the responses."""

    t: tuple[int, int, int, int]
    e: tuple[int, int]
    z: tuple[int, int]


def _or_prove(G: Group, y: int, stmts, i: int, w: int, tag: bytes, rng: np.random.Generator) -> OrProof:
    """Prove ``stmts[i] = (g^w, y^w)``; branch ``1 - i`` is simulated."""
    e_s, z_s = int.from_bytes(rng.bytes(16), "big"), random_scalar(G.q, rng)
    A, B = stmts[1 - i]
    sim = (G.mul(G.fixed_pow(G.g, z_s), G.pow(A, e_s)), G.mul(_ypow(G, y, z_s), G.pow(B, e_s)))
    u = random_scalar(G.q, rng)
    real = (G.fixed_pow(G.g, u), _ypow(G, y, u))
    t = real + sim if i == 0 else sim + real
    e_r = (_hash(G, tag, *(v for s in stmts for v in s), *t) - e_s) % _E
    z_r = (u - e_r * w) % G.q
    return OrProof(t, (e_r, e_s) if i == 0 else (e_s, e_r), (z_r, z_s) if i == 0 else (z_s, z_r))


def _or_verify(G: Group, y: int, stmts, pr: OrProof, tag: bytes) -> bool:
    if not isinstance(pr, OrProof) or (sum(pr.e) - _hash(G, tag, *(v for s in stmts for v in s), *pr.t)) % _E:
        return False
    for (A, B), e, z, ta, tb in zip(stmts, pr.e, pr.z, pr.t[0::2], pr.t[1::2]):
        if G.mul(G.fixed_pow(G.g, z), G.pow(A, e)) != ta or G.mul(_ypow(G, y, z), G.pow(B, e)) != tb:
            return False
    return True


def _dleq_prove(G: Group, base: int, pub: int, share: int, x: int, tag: bytes, rng) -> tuple[int, int]:
    """Chaum-Pedersen: ``log_g pub = log_base share = x``; returns (challenge, response)."""
    u = random_scalar(G.q, rng)
    e = _hash(G, tag, base, pub, share, G.fixed_pow(G.g, u), G.pow(base, u))
    return e, (u + e * x) % G.q


def _dleq_verify(G: Group, base: int, pub: int, share: int, pr, tag: bytes) -> bool:
    e, s = pr
    t1 = G.mul(G.fixed_pow(G.g, s), G.pow(_inv(G, pub), e))
    t2 = G.mul(G.pow(base, s), G.pow(_inv(G, share), e))
    return e == _hash(G, tag, base, pub, share, t1, t2)


@dataclass
class JointTranscript:
    """Everything the verifier sees. ``flips[l][j]`` is slot l after prover j (``l < n_bits``, ``j < k``)."""

    session: bytes
    keys: list[int]
    key_proofs: list[tuple[int, int]]
    clients: list[Ciphertext]
    client_proofs: list[OrProof]
    flips: list[list[Ciphertext]]
    flip_proofs: list[list[OrProof]]
    shares: list[int]
    share_proofs: list[tuple[int, int]]


@dataclass
class JointRun:
    """A run and its secrets (for the tests and tamperings): key shares, each prover's sign bits, the noise."""

    transcript: JointTranscript
    secrets: list[int]
    signs: np.ndarray
    count: int
    noise: int


# a prover's strategy: (prover j, slot l, ciphertext it receives, rng) -> sign bit s_j in {0, 1}
Strategy = Callable[[int, int, Ciphertext, np.random.Generator], int]


def honest(j: int, l: int, E: Ciphertext, rng: np.random.Generator) -> int:
    """A fair sign bit, independent of everything."""
    return int(rng.integers(0, 2))


def make_adaptive(G: Group) -> Strategy:
    """A cheater that wants every slot to end at ``m = +1``: it reads ``m`` off the ciphertext when it can (``a = 1``,
    ``b = g^{+-1}``: a slot nobody re-randomised) and negates when it sees ``-1``; otherwise it guesses from a hash
    of the ciphertext."""
    g_inv = _inv(G, G.g)

    def adaptive(j, l, E, rng):
        if E.a == 1 and E.b in (G.g, g_inv):
            return int(E.b == g_inv)
        return hashlib.sha256(_enc(E.b)).digest()[0] & 1
    return adaptive


def make_coalition(G: Group, known: list[int]) -> Strategy:
    """A coalition of cheaters that pools the key shares ``known`` (every share but the honest prover's) and wants
    every slot to end at ``m = +1``. It strips its part of the decryption off the slot it receives,
    ``b / a^{sum known} = g^m y_h^r`` (``y_h`` the honest prover's key); it reads ``m`` exactly when that leaves
    ``g^{+-1}`` (no re-randomisation, or ``known`` holds the whole key) and negates a -1; otherwise it guesses
    ``m = -1`` when the Legendre symbol of the remainder is -1."""
    x_known, g_inv = sum(known) % G.q, _inv(G, G.g)

    def coalition(j, l, E, rng):
        rest = G.mul(E.b, _inv(G, signed(pow(E.a, x_known, G.p), G.p)))
        if rest in (G.g, g_inv):
            return int(rest == g_inv)
        return int(pow(rest, G.q, G.p) == G.p - 1)
    return coalition


def flip(G: Group, y: int, E: Ciphertext, s: int, r: int) -> Ciphertext:
    """Re-randomise ``E`` (``s = 0``) or ``E^{-1}`` (``s = 1``) with fresh ``r``: ``(a^+-1 g^r, b^+-1 y^r)``."""
    a, b = (E.a, E.b) if s == 0 else (_inv(G, E.a), _inv(G, E.b))
    return Ciphertext(G.mul(a, G.fixed_pow(G.g, r)), G.mul(b, _ypow(G, y, r)))


def _flip_stmts(G: Group, E: Ciphertext, F: Ciphertext):
    return ((G.mul(F.a, _inv(G, E.a)), G.mul(F.b, _inv(G, E.b))), (G.mul(F.a, E.a), G.mul(F.b, E.b)))


def _client_stmts(G: Group, C: Ciphertext):
    return ((C.a, C.b), (C.a, G.mul(C.b, _inv(G, G.g))))


def _tag(session: bytes, *parts) -> bytes:
    return session + b"|" + "|".join(map(str, parts)).encode()


def aggregate(G: Group, tr: JointTranscript) -> Ciphertext:
    """``prod_i E_i^2 / prod_l E_l`` (last ciphertext of every slot): it encrypts ``g^{2 count + 2 Z}``."""
    a = b = 1
    for C in tr.clients:
        a, b = G.mul(a, G.mul(C.a, C.a)), G.mul(b, G.mul(C.b, C.b))
    for row in tr.flips:
        a, b = G.mul(a, _inv(G, row[-1].a)), G.mul(b, _inv(G, row[-1].b))
    return Ciphertext(a, b)


def run_joint(G: Group, x, k: int, n_bits: int, session: bytes, rng: np.random.Generator,
              strategies: list[Strategy] | Callable[[list[int]], list[Strategy]] | None = None,
              rerandomize: bool = True,
              rogue_last: bool = False) -> JointRun:
    """One execution: keys, client encryptions, k sequential flips of each of ``n_bits`` slots, joint decryption.

    ``x``: (n,) client bits; ``strategies``: one per prover (default all :func:`honest`), or a function of the
    provers' key shares returning them (for coalitions that pool their shares, :func:`make_coalition`); ``rerandomize=False``
    is the broken variant used as a control (flips without fresh randomness, so a slot's value stays readable).
    ``rogue_last=True``: the last prover publishes the rogue key ``g^{x'} / prod_{j<k} y_j`` (its proof of knowledge
    is then a forgery) and, after seeing the others' decryption shares, the share that makes the total ``a^{x'}``;
    ``secrets`` then sums to ``x'``, the key the rogue prover alone holds.
    """
    x = np.asarray(x)
    if x.ndim != 1 or not np.isin(x, (0, 1)).all():
        raise ValueError("x must be a 1-D array of 0/1 client bits")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    if isinstance(n_bits, bool) or not isinstance(n_bits, int) or n_bits < 2 or n_bits % 2:
        raise ValueError(f"n_bits must be an even integer >= 2, got {n_bits!r}")
    xs = [random_scalar(G.q, rng) for _ in range(k)]
    strategies = (strategies(list(xs)) if callable(strategies) else strategies) or [honest] * k
    if len(strategies) != k:
        raise ValueError(f"strategies must have one entry per prover (k={k}), got {len(strategies)}")
    keys = [G.fixed_pow(G.g, v) for v in xs]
    if rogue_last:
        x_rogue = random_scalar(G.q, rng)
        keys[-1] = G.mul(G.fixed_pow(G.g, x_rogue), _inv(G, _prod(G, keys[:-1])))
        xs[-1] = (x_rogue - sum(xs[:-1])) % G.q  # what the rogue can act as; it cannot prove knowledge of it
    key_proofs = [_dleq_prove(G, G.g, yj, yj, v, _tag(session, "key", j), rng) for j, (yj, v) in
                  enumerate(zip(keys, xs))]
    if rogue_last:  # the forgery: a proof for a key it made up
        key_proofs[-1] = _dleq_prove(G, G.g, keys[-1], keys[-1], random_scalar(G.q, rng), _tag(session, "key", k - 1),
                                     rng)
    y = _prod(G, keys)
    if (n_bits * k if rerandomize else 0) + len(x) > 60:
        G.fixed_pow(y, 1)  # build y's comb table: pays off beyond a few dozen powers of y
    clients, client_proofs = [], []
    for i, xi in enumerate(x.tolist()):
        r = random_scalar(G.q, rng)
        C = Ciphertext(G.fixed_pow(G.g, r), G.mul(G.fixed_pow(G.g, xi), _ypow(G, y, r)))
        clients.append(C)
        client_proofs.append(_or_prove(G, y, _client_stmts(G, C), xi, r, _tag(session, "client", i), rng))
    flips, flip_proofs, signs = [], [], np.zeros((n_bits, k), dtype=np.int64)
    for l in range(n_bits):
        E, row, prow = Ciphertext(1, G.g), [], []
        for j in range(k):
            s = int(strategies[j](j, l, E, rng))
            r = random_scalar(G.q, rng) if rerandomize else 0
            F = flip(G, y, E, s, r)
            prow.append(_or_prove(G, y, _flip_stmts(G, E, F), s, r, _tag(session, "flip", l, j), rng)
                        if rerandomize else None)
            signs[l, j], E = s, F
            row.append(F)
        flips.append(row)
        flip_proofs.append(prow)
    tr = JointTranscript(session, keys, key_proofs, clients, client_proofs, flips, flip_proofs, [], [])
    A = aggregate(G, tr)
    tr.shares = [G.pow(A.a, v) for v in xs]
    tr.share_proofs = [_dleq_prove(G, A.a, yj, d, v, _tag(session, "share", j), rng)
                       for j, (yj, d, v) in enumerate(zip(keys, tr.shares, xs))]
    if rogue_last:  # it cannot prove its share either
        tr.share_proofs[-1] = _dleq_prove(G, A.a, keys[-1], tr.shares[-1], random_scalar(G.q, rng),
                                          _tag(session, "share", k - 1), rng)
    m = 1 - 2 * (signs.sum(1) % 2)  # each slot's final sign
    return JointRun(tr, xs, signs, int(x.sum()), int(-m.sum() // 2))


@dataclass(frozen=True)
class JointVerdict:
    ok: bool
    reason: str
    count: int | None = None


def verify_joint(G: Group, tr: JointTranscript, n_clients: int, k: int, n_bits: int,
                 check_proofs: bool = True) -> JointVerdict:
    """The public verifier: key proofs, decryption proofs, client bit proofs and every flip proof against the slot's
    previous ciphertext (cheap checks first), then the released ``count + Z``. ``check_proofs=False`` keeps only
    the shapes, the group membership and the decryption (the negative control)."""
    if (len(tr.keys) != k or len(tr.key_proofs) != k or len(tr.clients) != n_clients
            or len(tr.client_proofs) != n_clients or len(tr.flips) != n_bits or len(tr.flip_proofs) != n_bits
            or any(len(r) != k for r in tr.flips + tr.flip_proofs) or len(tr.shares) != k
            or len(tr.share_proofs) != k):
        return JointVerdict(False, "shape")
    elems = tr.keys + tr.shares + [v for C in tr.clients + [F for r in tr.flips for F in r] for v in (C.a, C.b)]
    if not all(G.is_element(v) for v in elems):
        return JointVerdict(False, "element")
    y = _prod(G, tr.keys)
    if check_proofs and not all(_dleq_verify(G, G.g, yj, yj, pr, _tag(tr.session, "key", j))
                                for j, (yj, pr) in enumerate(zip(tr.keys, tr.key_proofs))):
        return JointVerdict(False, "key proof")
    A = aggregate(G, tr)
    if check_proofs and not all(_dleq_verify(G, A.a, yj, d, pr, _tag(tr.session, "share", j))
                                for j, (yj, d, pr) in enumerate(zip(tr.keys, tr.shares, tr.share_proofs))):
        return JointVerdict(False, "decryption proof")
    if check_proofs:
        if not all(_or_verify(G, y, _client_stmts(G, C), pr, _tag(tr.session, "client", i))
                   for i, (C, pr) in enumerate(zip(tr.clients, tr.client_proofs))):
            return JointVerdict(False, "client proof")
        for l, (row, prow) in enumerate(zip(tr.flips, tr.flip_proofs)):
            E = Ciphertext(1, G.g)
            for j, (F, pr) in enumerate(zip(row, prow)):
                if not _or_verify(G, y, _flip_stmts(G, E, F), pr, _tag(tr.session, "flip", l, j)):
                    return JointVerdict(False, "flip proof")
                E = F
    gm = A.b
    for d in tr.shares:
        gm = G.mul(gm, _inv(G, d))
    lo, hi = -n_bits, 2 * n_clients + n_bits  # M = 2 count - sum_l m_l
    acc = signed(pow(G.g, lo % G.q, G.p), G.p)
    for M in range(lo, hi + 1, 2):
        if acc == gm:
            return JointVerdict(True, "ok", M // 2)
        acc = G.mul(acc, G.mul(G.g, G.g))
    return JointVerdict(False, "no admissible count")


def slot_signs(G: Group, run: JointRun) -> np.ndarray:
    """(n_bits,) final ``m_l`` of every slot, decrypted with all key shares (only the test harness can do this)."""
    x = sum(run.secrets) % G.q
    out = []
    for row in run.transcript.flips:
        F = row[-1]
        gm = G.mul(F.b, _inv(G, signed(pow(F.a, x, G.p), G.p)))
        out.append(1 if gm == G.g else -1 if gm == _inv(G, G.g) else 0)
    return np.array(out)


# ----- cheating provers ------------------------------------------------------------------------------------------

def _redecrypt(G: Group, tr: JointTranscript, secrets: list[int], rng) -> JointTranscript:
    """All provers decrypt the (tampered) transcript they are shown, with valid decryption proofs."""
    A = aggregate(G, tr)
    tr.shares = [G.pow(A.a, v) for v in secrets]
    tr.share_proofs = [_dleq_prove(G, A.a, yj, d, v, _tag(tr.session, "share", j), rng)
                       for j, (yj, d, v) in enumerate(zip(tr.keys, tr.shares, secrets))]
    return tr


def _t_not_a_flip(G, run, rng):
    """The last prover multiplies the first slot by ``g^2`` (+1 becomes 3, -1 becomes 1: the noise drops by one)."""
    tr = copy.deepcopy(run.transcript)
    F = tr.flips[0][-1]
    tr.flips[0][-1] = Ciphertext(F.a, G.mul(F.b, G.mul(G.g, G.g)))
    return _redecrypt(G, tr, run.secrets, rng)


def _t_replaced_slot(G, run, rng):
    """The last prover replaces the first slot by a fresh encryption of +1 of its choosing (ignores earlier flips)."""
    tr = copy.deepcopy(run.transcript)
    y, r = _prod(G, tr.keys), random_scalar(G.q, rng)
    tr.flips[0][-1] = Ciphertext(G.fixed_pow(G.g, r), G.mul(G.g, _ypow(G, y, r)))
    return _redecrypt(G, tr, run.secrets, rng)


def _t_bad_share(G, run, rng):
    """The first prover publishes a wrong decryption share (shifts the released count by one)."""
    tr = copy.deepcopy(run.transcript)
    tr.shares[0] = G.mul(tr.shares[0], G.mul(G.g, G.g))
    return tr


def _t_client_two(G, run, rng):
    """The first client encrypts its bit plus one (2 for a 1: it votes twice)."""
    tr = copy.deepcopy(run.transcript)
    C = tr.clients[0]
    tr.clients[0] = Ciphertext(C.a, G.mul(C.b, G.g))
    return _redecrypt(G, tr, run.secrets, rng)


# name -> (what the cheater does, the tampering); each returns the transcript the verifier then sees
JOINT_TAMPERINGS = {name: (" ".join(fn.__doc__.split()), fn) for name, fn in {
    "flip not +-1": _t_not_a_flip, "slot replaced": _t_replaced_slot,
    "wrong decryption share": _t_bad_share, "client votes twice": _t_client_two}.items()}
