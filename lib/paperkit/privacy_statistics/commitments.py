"""Pedersen commitments, bit proofs and a public verifier for private counting with shared noise.

Group. ``p`` is the 2048-bit safe prime of RFC 3526 (MODP group 14), ``p = 2q + 1`` with ``q`` prime. We work in the
subgroup of quadratic residues (prime order ``q``) and store each element by its signed representative
``|x| = min(x, p - x)`` (the "signed quadratic residues" of Hofheinz and Kiltz): as ``p = 3 (mod 4)`` exactly one of
``x, -x`` is a residue, so every integer in ``[1, q]`` is one group element and membership is a range check; the
order-2 element ``-1`` cannot be smuggled into a proof. ``g = 2`` (a residue since ``p = 7 mod 8``); ``h`` is
hashed into the group from a public label, so nobody knows ``log_g h``, which is what binding rests on.

Commitment. ``Com(m, r) = g^m h^r`` with ``m, r`` in ``Z_q``: perfectly hiding, computationally binding, and
additively homomorphic, ``Com(a, r) Com(b, s) = Com(a + b, r + s)``.

Bit proof. A non-interactive Sigma-OR proof (Cramer-Damgard-Schoenmakers, Fiat-Shamir with SHA-256) that ``C``
opens to 0 or 1: a Schnorr proof of ``log_h C`` or of ``log_h (C / g)``, one branch simulated. Challenges are
128-bit; the hash binds the group, a context string (session, role, index) and ``C``, so proofs cannot be replayed
elsewhere.

Protocol (our reading of the paper's abstract; see :func:`run_counting`). n clients hold bits ``x_i``; each splits
its bit into ``k`` additive shares mod ``q``, one per prover, publishes a commitment to every share and a bit proof
on their product. The noise is committed the same way, bit by bit: ``sn-vbm`` one binomial sample (each bit XORed
with a public coin, so that it is fair whoever chose it), ``sn-vlm`` one discrete Laplace sample whose biased bits
``[U < T]`` are tied to public-coin-flipped uniform bits by a range relation, ``indep-vbm`` the baseline in which
every prover commits to and adds its own binomial sample. Each prover publishes its share ``y_j`` of count plus
noise and ``z_j`` of the randomness; the verifier checks every bit proof, every relation and, per prover,
``prod_i C_ij * noise_j = g^{y_j} h^{z_j}``, then releases ``sum_j y_j - offset``.

Simplification. The shared noise bits come from a preprocessing step that we run as one party (a dealer) that sees
the bits; the paper generates them jointly among the provers. Everything the verifier checks is real; privacy
against a coalition that includes that dealer is not modelled.

Speed. ``g`` and ``h`` are fixed, so their powers come from comb tables (256 table products instead of about 2,300
squarings and products in ``pow``); bit proofs are checked in one batch by the small-exponent test of
Bellare, Garay and Rabin (two multi-exponentiations for all of them). The ``*_ref`` twins do the same with plain
``pow`` and one proof at a time. Randomness comes from an explicit ``numpy.random.Generator`` so that runs
reproduce; that is not a cryptographic generator, and a deployment would draw the same values from ``secrets``.
"""
from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

# RFC 3526, section 3: p = 2^2048 - 2^1984 - 1 + 2^64 * (floor(2^1918 pi) + 124476).
MODP14_P = int(
    "FFFFFFFFFFFFFFFFC90FDAA22168C234C4C6628B80DC1CD129024E088A67CC74020BBEA63B139B22514A08798E3404DDEF9519B3CD3A"
    "431B302B0A6DF25F14374FE1356D6D51C245E485B576625E7EC6F44C42E9A637ED6B0BFF5CB6F406B7EDEE386BFB5A899FA5AE9F2411"
    "7C4B1FE649286651ECE45B3DC2007CB8A163BF0598DA48361C55D39A69163FA8FD24CF5F83655D23DCA3AD961C62F356208552BB9ED5"
    "29077096966D670C354E4ABC9804F1746C08CA18217C32905E462E36CE3BE39E772C180E86039B2783A2EC07A28FB5C55DF06F4C52C9"
    "DE2BCBF6955817183995497CEA956AE515D2261898FA051015728E5A8AACAA68FFFFFFFFFFFFFFFF",
    16,
)
CHALLENGE_BITS = 128  # Fiat-Shamir challenges: a cheating prover passes with probability 2^-128
BATCH_BITS = 64  # small-exponent batch test: one bad proof slips through with probability <= 2^-64
DEFAULT_LABEL = b"paperkit/verifiable_dp_shared_noise/pedersen-h"
KINDS = ("sn-vbm", "sn-vlm", "indep-vbm")


def signed(x: int, p: int) -> int:
    """The signed representative ``min(x mod p, p - x mod p)`` of ``+-x``: the group element's canonical form."""
    x %= p
    return min(x, p - x)


@dataclass
class Group:
    """The order-``q`` group of signed quadratic residues modulo the safe prime ``p = 2q + 1``, with bases g, h.

    Elements are integers in ``[1, q]``. ``exps`` counts exponentiations done through this object (one per
    fixed-base or variable-base power, one per base of a multi-exponentiation): the chapter's counted work.
    Comb tables for fixed bases are built on first use and kept on the object (about 18 MB each).
    """

    p: int
    q: int
    g: int
    h: int
    exps: int = 0
    _tables: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def g_inv(self) -> int:
        return signed(pow(self.g, -1, self.p), self.p)

    def is_element(self, x) -> bool:
        return isinstance(x, int) and not isinstance(x, bool) and 1 <= x <= self.q

    def mul(self, a: int, b: int) -> int:
        return signed(a * b, self.p)

    def pow(self, x: int, e: int) -> int:
        """``x^e`` for a variable base (plain ``pow``)."""
        self.exps += 1
        return signed(pow(x, e % self.q, self.p), self.p)

    def fixed_pow(self, base: int, e: int) -> int:
        """``base^e`` through the comb table of ``base``: one table product per non-zero byte of ``e mod q``."""
        return signed(self._fixed_raw(base, e), self.p)

    def _fixed_raw(self, base: int, e: int) -> int:
        table = self._tables.get(base)
        if table is None:
            table = self._tables[base] = _comb_table(base, self.p, (self.q.bit_length() + 7) // 8)
        self.exps += 1
        p, acc = self.p, 1
        # base^e = prod_i table[i][byte_i(e)], table[i][d] = base^(d 256^i)
        for row, byte in zip(table, (e % self.q).to_bytes(len(table), "little")):
            if byte:
                acc = acc * row[byte] % p
        return acc

    def digest(self) -> bytes:
        return hashlib.sha256(b"".join(_enc(v) for v in (self.p, self.q, self.g, self.h))).digest()


def _comb_table(base: int, p: int, n_rows: int) -> list[list[int]]:
    table, b = [], base
    for _ in range(n_rows):
        row = [1, b]
        for _ in range(254):
            row.append(row[-1] * b % p)
        table.append(row)
        b = row[255] * b % p  # b^256: the next row's base
    return table


def _enc(x: int) -> bytes:
    return x.to_bytes(256, "big")


def hash_to_group(p: int, label: bytes) -> int:
    """An element of the signed-residue group mod ``p`` derived from ``label`` (SHAKE-256, 128 spare bits)."""
    x = int.from_bytes(hashlib.shake_256(b"paperkit hash-to-group|" + label).digest(272), "big")
    s = signed(x, p)
    if s <= 1:
        raise ValueError("hash landed on the identity; choose another label")
    return s


def modp2048_group(label: bytes = DEFAULT_LABEL) -> Group:
    """RFC 3526 group 14 (2048-bit safe prime), ``g = 2``, ``h = hash_to_group(p, label)``."""
    p = MODP14_P
    return Group(p=p, q=(p - 1) // 2, g=2, h=hash_to_group(p, label))


def commit(G: Group, m: int, r: int) -> int:
    """Pedersen commitment ``g^m h^r`` (``m, r`` reduced mod q) through the comb tables."""
    return signed(G._fixed_raw(G.g, m) * G._fixed_raw(G.h, r), G.p)


def commit_ref(G: Group, m: int, r: int) -> int:
    """Reference of :func:`commit` (same signature): two plain ``pow`` calls."""
    return signed(pow(G.g, m % G.q, G.p) * pow(G.h, r % G.q, G.p), G.p)


def multi_exp(G: Group, bases: list[int], exps: list[int]) -> int:
    """``prod_i bases[i]^exps[i]`` by Straus' interleaving: one shared chain of squarings, 4-bit windows.

    Cost: ~max bit length squarings plus, per base, one product per non-zero 4-bit digit (and a small table),
    instead of a full exponentiation per base.
    """
    if len(bases) != len(exps):
        raise ValueError(f"bases and exps must have the same length, got {len(bases)} and {len(exps)}")
    p, q = G.p, G.q
    G.exps += len(bases)
    digits, tables = [], []
    for b, e in zip(bases, exps):
        e %= q
        d = [(e >> s) & 15 for s in range(0, e.bit_length(), 4)]
        row = [1, b]
        for _ in range(max(d, default=0) - 1):
            row.append(row[-1] * b % p)
        digits.append(d)
        tables.append(row)
    acc = 1
    for pos in range(max((len(d) for d in digits), default=0) - 1, -1, -1):
        if acc != 1:
            for _ in range(4):
                acc = acc * acc % p
        for d, row in zip(digits, tables):
            if pos < len(d) and d[pos]:
                acc = acc * row[d[pos]] % p
    return signed(acc, p)


def multi_exp_ref(G: Group, bases: list[int], exps: list[int]) -> int:
    """Reference of :func:`multi_exp` (same signature): one ``pow`` per base."""
    if len(bases) != len(exps):
        raise ValueError(f"bases and exps must have the same length, got {len(bases)} and {len(exps)}")
    acc = 1
    for b, e in zip(bases, exps):
        acc = acc * pow(b, e % G.q, G.p) % G.p
    return signed(acc, G.p)


def random_scalar(q: int, rng: np.random.Generator) -> int:
    """A uniform element of ``Z_q`` (from 128 extra bits, so the modulo bias is below 2^-128)."""
    return int.from_bytes(rng.bytes((q.bit_length() + 7) // 8 + 16), "little") % q


def share(x: int, k: int, q: int, rng: np.random.Generator) -> list[int]:
    """Additive sharing of ``x`` mod ``q`` into ``k`` shares: any ``k - 1`` of them are uniform, all sum to ``x``."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    s = [random_scalar(q, rng) for _ in range(k - 1)]
    return s + [(x - sum(s)) % q]


# ----- bit proofs ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BitProof:
    """Sigma-OR proof that ``C`` commits to 0 or 1: ``h^{z_b} Y_b^{e_b} = a_b`` with ``Y_0 = C``, ``Y_1 = C/g``,
    ``e_0 + e_1 = H(context, C, a_0, a_1) mod 2^128``."""

    a0: int
    a1: int
    e0: int
    e1: int
    z0: int
    z1: int


def _challenge(G: Group, context: bytes, c: int, a0: int, a1: int) -> int:
    data = b"paperkit bit proof|" + G.digest() + len(context).to_bytes(4, "big") + context
    return int.from_bytes(hashlib.sha256(data + _enc(c) + _enc(a0) + _enc(a1)).digest()[:16], "big")


def prove_bit(G: Group, c: int, b: int, r: int, context: bytes, rng: np.random.Generator) -> BitProof:
    """Proof that ``c = Com(b, r)`` holds a bit; the branch ``1 - b`` is simulated. Raises for ``b`` not 0 or 1."""
    if b not in (0, 1):
        raise ValueError(f"b must be 0 or 1 to prove it is a bit, got {b!r}")
    ys = (c, G.mul(c, G.g_inv))
    e_sim = int.from_bytes(rng.bytes(CHALLENGE_BITS // 8), "big")
    z_sim = random_scalar(G.q, rng)
    # simulated branch: pick (e, z) first, then a = h^z Y^e satisfies the check by construction
    a_sim = G.mul(G.fixed_pow(G.h, z_sim), G.pow(ys[1 - b], e_sim))
    w = random_scalar(G.q, rng)
    a_real = G.fixed_pow(G.h, w)
    a0, a1 = (a_real, a_sim) if b == 0 else (a_sim, a_real)
    e_real = (_challenge(G, context, c, a0, a1) - e_sim) % 2**CHALLENGE_BITS
    # real branch: h^(w - e r) Y_b^e = h^w since Y_b = h^r
    z_real = (w - e_real * r) % G.q
    if b == 0:
        return BitProof(a0, a1, e_real, e_sim, z_real, z_sim)
    return BitProof(a0, a1, e_sim, e_real, z_sim, z_real)


def _proof_well_formed(G: Group, c: int, pr: BitProof, context: bytes) -> bool:
    if not isinstance(pr, BitProof) or not all(G.is_element(v) for v in (c, pr.a0, pr.a1)):
        return False
    scalars = (pr.e0, pr.e1, pr.z0, pr.z1)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in scalars):
        return False
    if not (0 <= pr.e0 < 2**CHALLENGE_BITS and 0 <= pr.e1 < 2**CHALLENGE_BITS and 0 <= pr.z0 < G.q
            and 0 <= pr.z1 < G.q):
        return False
    return (pr.e0 + pr.e1) % 2**CHALLENGE_BITS == _challenge(G, context, c, pr.a0, pr.a1)


def _check_proof_args(commitments, proofs, contexts) -> None:
    if not len(commitments) == len(proofs) == len(contexts):
        raise ValueError(f"commitments, proofs and contexts must have one entry each, got "
                         f"{len(commitments)}, {len(proofs)}, {len(contexts)}")


def verify_bit_proofs(G: Group, commitments: list[int], proofs: list[BitProof], contexts: list[bytes],
                      rng: np.random.Generator) -> bool:
    """True iff every proof is valid, checked in one batch (false accept <= 2^-64 + 2^-128 per bad proof).

    Raising each proof's two equations to fresh random 64-bit powers and multiplying them gives one equation,
    ``h^{sum(rho0 z0 + rho1 z1)} g^{-sum rho1 e1} prod C^{rho0 e0 + rho1 e1} = prod a0^{rho0} a1^{rho1}``,
    checked with two multi-exponentiations.
    """
    _check_proof_args(commitments, proofs, contexts)
    if not all(_proof_well_formed(G, c, pr, ctx) for c, pr, ctx in zip(commitments, proofs, contexts)):
        return False
    if not proofs:
        return True
    rho = [int(v) + 1 for v in rng.integers(0, 2**BATCH_BITS - 1, size=2 * len(proofs), dtype=np.uint64)]
    r0, r1 = rho[0::2], rho[1::2]
    zh = sum(a * pr.z0 + b * pr.z1 for a, b, pr in zip(r0, r1, proofs))
    eg = sum(b * pr.e1 for b, pr in zip(r1, proofs))
    lhs = G.mul(G.mul(G.fixed_pow(G.h, zh), G.fixed_pow(G.g, -eg)),
                multi_exp(G, list(commitments), [a * pr.e0 + b * pr.e1 for a, b, pr in zip(r0, r1, proofs)]))
    rhs = multi_exp(G, [pr.a0 for pr in proofs] + [pr.a1 for pr in proofs], r0 + r1)
    return lhs == rhs


def verify_bit_proofs_ref(G: Group, commitments: list[int], proofs: list[BitProof], contexts: list[bytes],
                          rng: np.random.Generator) -> bool:
    """Reference of :func:`verify_bit_proofs` (same signature; ``rng`` unused): both equations of every proof."""
    _check_proof_args(commitments, proofs, contexts)
    for c, pr, ctx in zip(commitments, proofs, contexts):
        if not _proof_well_formed(G, c, pr, ctx):
            return False
        for y, a, e, z in ((c, pr.a0, pr.e0, pr.z0), (G.mul(c, G.g_inv), pr.a1, pr.e1, pr.z1)):
            if G.mul(G.fixed_pow(G.h, z), G.pow(y, e)) != a:
                return False
    return True


# ----- the counting protocol -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MechanismSpec:
    """Public parameters of a counting mechanism, known to provers and verifier.

    ``kind``: ``sn-vbm`` (one binomial sample of ``n_bits`` coins, shared), ``indep-vbm`` (each of the ``k`` provers
    adds its own ``n_bits``-coin binomial sample), ``sn-vlm`` (one discrete Laplace sample ``G1 - G2``, bit ``i`` of
    each ``G`` being ``[U < thresholds[i]]`` for a uniform ``precision``-bit ``U``; see
    :mod:`paperkit.privacy_statistics.dp_mechanisms`).
    """

    kind: str
    k: int
    n_bits: int = 0
    thresholds: tuple[int, ...] = ()
    precision: int = 0

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")
        if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 1:
            raise ValueError(f"k must be a positive integer, got {self.k!r}")
        if self.kind.endswith("vbm") and (self.n_bits < 2 or self.n_bits % 2):
            raise ValueError(f"n_bits must be an even integer >= 2 for {self.kind}, got {self.n_bits}")
        if self.kind == "sn-vlm":
            if not 1 <= self.precision <= 40 or not self.thresholds:
                raise ValueError(f"sn-vlm needs thresholds and a precision in [1, 40], got {self.precision}")
            if any(not 0 <= t <= 2**self.precision for t in self.thresholds):
                raise ValueError(f"thresholds must lie in [0, 2^precision], got {self.thresholds}")


@dataclass(frozen=True)
class Slot:
    """One committed noise bit: ``owner`` gets the constant when it is flipped by a public coin (and, for
    indep-vbm, is the only prover with a non-trivial share); ``weight`` is its coefficient in the noise."""

    owner: int
    flipped: bool
    weight: int


@dataclass(frozen=True)
class Relation:
    """sn-vlm: ``U - T + 2^L beta - R = 0`` with ``U = sum_t 2^t u_t`` (flipped bits), ``R = sum_t 2^t d_t``."""

    u: tuple[int, ...]
    beta: int
    d: tuple[int, ...]
    threshold: int


def noise_layout(spec: MechanismSpec) -> tuple[list[Slot], list[Relation], int]:
    """The noise bits a mechanism commits to, its range relations, and the public offset subtracted at release."""
    if spec.kind == "sn-vbm":
        return [Slot(0, True, 1)] * spec.n_bits, [], spec.n_bits // 2
    if spec.kind == "indep-vbm":
        slots = [Slot(j, True, 1) for j in range(spec.k) for _ in range(spec.n_bits)]
        return slots, [], spec.k * spec.n_bits // 2
    slots, rels, L = [], [], spec.precision
    for sign in (1, -1):  # Z = G1 - G2
        for i, t in enumerate(spec.thresholds):
            u = tuple(range(len(slots), len(slots) + L))
            slots += [Slot(0, True, 0)] * L
            beta = len(slots)
            slots.append(Slot(0, False, sign * 2**i))
            d = tuple(range(len(slots), len(slots) + L))
            slots += [Slot(0, False, 0)] * L
            rels.append(Relation(u, beta, d, t))
    return slots, rels, 0


@dataclass
class Transcript:
    """Everything the verifier sees. Commitment tables are (rows, k): one commitment per prover share."""

    session: bytes
    clients: list[list[int]]
    client_proofs: list[BitProof]
    noise: list[list[int]]
    noise_proofs: list[BitProof]
    coins: list[int]
    relation_rand: list[int]
    outputs: list[tuple[int, int]]


@dataclass
class Openings:
    """The provers' secrets: (value share, randomness share) per row and prover, for clients and noise bits."""

    clients: list[list[tuple[int, int]]]
    noise: list[list[tuple[int, int]]]


@dataclass
class ClientBatch:
    """The clients' public submissions and the shares they sent to the provers."""

    session: bytes
    commitments: list[list[int]]
    proofs: list[BitProof]
    openings: list[list[tuple[int, int]]]
    count: int


@dataclass(frozen=True)
class CoinRecord:
    """What the verifier keeps when it issues the public coins: the coins, and a digest of the committed bits
    they answer (so that a bit cannot be changed once its coin is known)."""

    coins: tuple[int, ...]
    digest: bytes


def coin_digest(rows: list[list[int]]) -> bytes:
    """SHA-256 of the commitment rows that public coins are issued against."""
    return hashlib.sha256(b"paperkit coins|" + b"".join(_enc(c) for row in rows for c in row)).digest()


def fair_bits(G: Group, run: Run) -> tuple[np.ndarray, np.ndarray]:
    """The committed fair-bit slots of a run, read from its openings: (dealer's bits, bits after the public coins)."""
    slots, _, _ = noise_layout(run.spec)
    idx = [l for l, s in enumerate(slots) if s.flipped]
    committed = np.array([_value(run.openings.noise[l], G.q) for l in idx])
    return committed, committed ^ np.array([run.transcript.coins[l] for l in idx])


@dataclass
class Run:
    """One execution: the public transcript, the provers' openings, the verifier's record of the coins it
    issued, the true count and the true noise."""

    spec: MechanismSpec
    transcript: Transcript
    openings: Openings
    record: CoinRecord
    count: int
    noise: int


def _ctx(session: bytes, role: str, i: int) -> bytes:
    return session + f"|{role}|{i}".encode()


def _commit_shares(G: Group, v: int, k: int, rng: np.random.Generator, owner: int | None = None):
    """Commit to ``v`` split into ``k`` shares. Returns (share commitments, openings, aggregate randomness).

    ``owner=None``: additive shares mod q (the last commitment is the aggregate divided by the others, which saves
    a commitment). ``owner=j``: prover j holds ``v`` whole, the others hold 0 with commitment ``Com(0, 0) = 1``.
    """
    t = random_scalar(G.q, rng)
    agg = commit(G, v, t)
    if owner is not None:
        opens = [(v, t) if j == owner else (0, 0) for j in range(k)]
        return [agg if j == owner else 1 for j in range(k)], opens, t
    vs, ts = share(v, k, G.q, rng), share(t, k, G.q, rng)
    coms = [commit(G, vs[j], ts[j]) for j in range(k - 1)]
    rest = 1
    for c in coms:
        rest = rest * c % G.p
    coms.append(signed(agg * pow(rest, -1, G.p), G.p))
    return coms, list(zip(vs, ts)), t


def submit_clients(G: Group, x, k: int, session: bytes, rng: np.random.Generator) -> ClientBatch:
    """Each client commits to the k shares of its bit ``x[i]`` and proves their product holds a bit."""
    x = np.asarray(x)
    if x.ndim != 1 or not np.isin(x, (0, 1)).all():
        raise ValueError("x must be a 1-D array of 0/1 client bits")
    coms, proofs, opens = [], [], []
    for i, xi in enumerate(x.tolist()):
        c, o, t = _commit_shares(G, xi, k, rng)
        coms.append(c)
        opens.append(o)
        proofs.append(prove_bit(G, _product(G, c), xi, t, _ctx(session, "client", i), rng))
    return ClientBatch(session, coms, proofs, opens, int(x.sum()))


def _product(G: Group, elems) -> int:
    acc = 1
    for e in elems:
        acc = acc * e % G.p
    return signed(acc, G.p)


def _preprocess(G: Group, spec: MechanismSpec, session: bytes, rng: np.random.Generator,
                beacon: np.random.Generator, dealer_bit: int | None = None, coins_first: bool = False):
    """Commit to the noise bits (dealer, or each prover for indep-vbm), draw the public coins, and for sn-vlm
    derive the biased bits and range witnesses from the flipped bits. Returns the public and private parts.
    ``dealer_bit`` in {0, 1}: a dishonest dealer that commits that value to every fair-bit slot.
    ``coins_first``: the broken order (coins drawn before the commitments); the dealer, who then knows each coin,
    commits ``dealer_bit XOR coin`` so that every flipped bit equals ``dealer_bit``."""
    slots, rels, _ = noise_layout(spec)
    m, k = len(slots), spec.k
    coms, proofs, opens = [None] * m, [None] * m, [None] * m
    vals, rands = [0] * m, [0] * m
    tag = f"noise-{spec.kind}"

    def put(l: int, v: int, owner: int | None):
        coms[l], opens[l], rands[l] = _commit_shares(G, v, k, rng, owner)
        vals[l] = v
        proofs[l] = prove_bit(G, _product(G, coms[l]), v, rands[l], _ctx(session, tag, l), rng)

    phase1 = [l for l, s in enumerate(slots) if s.flipped]
    early = beacon.integers(0, 2, size=len(phase1)).tolist() if coins_first else None
    for i, l in enumerate(phase1):  # fair bits, committed before the coins exist (unless coins_first)
        v = int(rng.integers(0, 2)) if dealer_bit is None else dealer_bit
        put(l, v ^ early[i] if coins_first else v, slots[l].owner if spec.kind == "indep-vbm" else None)
    digest = coin_digest([coms[l] for l in phase1])  # the verifier's record of what it answers
    coins = [0] * m
    for l, c in zip(phase1, early if coins_first else beacon.integers(0, 2, size=len(phase1)).tolist()):
        coins[l] = c
    rel_rand = []
    for rel in rels:
        L = len(rel.u)
        u = sum((vals[l] ^ coins[l]) << t for t, l in enumerate(rel.u))
        beta = int(u < rel.threshold)
        r = u - rel.threshold + (beta << L)  # in [0, 2^L) exactly when beta = [u < T]
        put(rel.beta, beta, None)
        for t, l in enumerate(rel.d):
            put(l, (r >> t) & 1, None)
        rel_rand.append(_relation_randomness(rel, rands, coins, G.q))
    return coms, proofs, opens, CoinRecord(tuple(coins), digest), rel_rand, vals


def _relation_randomness(rel: Relation, rands: list[int], coins, q: int) -> int:
    """Opening of the relation's commitment to 0: randomness of Pos minus Neg (see :func:`_relation_holds`);
    flipped bits enter with a minus sign."""
    L = len(rel.u)
    pos = sum(rands[l] << t for t, l in enumerate(rel.u) if not coins[l]) + (rands[rel.beta] << L)
    neg = sum(rands[l] << t for t, l in enumerate(rel.u) if coins[l]) + sum(rands[l] << t for t, l in
                                                                            enumerate(rel.d))
    return (pos - neg) % q


def prover_output(G: Group, spec: MechanismSpec, coins: list[int], openings: Openings, j: int) -> tuple[int, int]:
    """Prover j's public share ``(y_j, z_j)``: its shares of the clients' bits plus its share of the noise
    ``sum_l weight_l * flip(bit_l)``, and the same combination of its randomness shares."""
    slots, _, _ = noise_layout(spec)
    y = sum(o[j][0] for o in openings.clients)
    z = sum(o[j][1] for o in openings.clients)
    for s, c, o in zip(slots, coins, openings.noise):
        if s.weight == 0:
            continue
        v, t = o[j]
        if c:  # bit XOR 1 = 1 - bit: the owner's share takes the 1, everyone negates
            v, t = int(j == s.owner) - v, -t
        y += s.weight * v
        z += s.weight * t
    return y % G.q, z % G.q


def run_counting(G: Group, spec: MechanismSpec, batch: ClientBatch, rng: np.random.Generator,
                 beacon: np.random.Generator, dealer_bit: int | None = None, coins_first: bool = False) -> Run:
    """One execution of ``spec`` on the clients' submissions: noise, coins (drawn from ``beacon``, the
    verifier's source), the provers' outputs. ``rng`` is the dealer's and provers' randomness. ``dealer_bit``
    (0 or 1): the dealer commits that value to every fair bit instead of a random one (a valid but dishonest
    choice that the public coins must neutralise); ``None``, the honest dealer. ``coins_first=True`` (needs
    ``dealer_bit``): the broken protocol in which the coins are issued before the commitments, so the dealer
    commits ``dealer_bit XOR coin`` and every flipped bit ends at ``dealer_bit`` (the control of the ordering)."""
    if any(len(row) != spec.k for row in batch.commitments):
        raise ValueError(f"batch was shared among {len(batch.commitments[0])} provers, spec has k={spec.k}")
    if dealer_bit not in (None, 0, 1):
        raise ValueError(f"dealer_bit must be None, 0 or 1, got {dealer_bit!r}")
    if coins_first and dealer_bit is None:
        raise ValueError("coins_first=True needs dealer_bit (the value the dealer aims every flipped bit at)")
    coms, proofs, opens, record, rel_rand, vals = _preprocess(G, spec, batch.session, rng, beacon, dealer_bit,
                                                              coins_first)
    openings = Openings(batch.openings, opens)
    coins = list(record.coins)
    outputs = [prover_output(G, spec, coins, openings, j) for j in range(spec.k)]
    tr = Transcript(batch.session, batch.commitments, batch.proofs, coms, proofs, coins, rel_rand, outputs)
    slots, _, offset = noise_layout(spec)
    noise = sum(s.weight * (v ^ c) for s, v, c in zip(slots, vals, coins)) - offset
    return Run(spec, tr, openings, record, batch.count, noise)


def release(G: Group, spec: MechanismSpec, outputs: list[tuple[int, int]]) -> int:
    """The released noisy count: ``sum_j y_j`` lifted from ``Z_q`` to a signed integer, minus the public offset."""
    y = sum(o[0] for o in outputs) % G.q
    return (y if y <= G.q // 2 else y - G.q) - noise_layout(spec)[2]


@dataclass(frozen=True)
class Verdict:
    ok: bool
    reason: str
    count: int | None = None


def verify(G: Group, spec: MechanismSpec, tr: Transcript, record: CoinRecord, rng: np.random.Generator,
           check_proofs: bool = True) -> Verdict:
    """The public verifier: accept and release the count, or reject naming the first failed check.

    ``record`` is what this verifier kept when it issued the coins; ``rng`` draws the batch-verification exponents.
    ``check_proofs=False`` skips the bit proofs (and nothing else): the negative control of the chapter.
    Checks, cheap first: shapes, group membership and canonical scalars, coins, indep-vbm share structure,
    sn-vlm range relations, the per-prover homomorphic output equations, the bit proofs.
    """
    slots, rels, _ = noise_layout(spec)
    k, m = spec.k, len(slots)
    rows = tr.clients + tr.noise
    if (len(tr.client_proofs) != len(tr.clients) or len(tr.noise) != m or len(tr.noise_proofs) != m
            or len(tr.coins) != m or len(tr.relation_rand) != len(rels) or len(tr.outputs) != k
            or any(len(row) != k for row in rows)):
        return Verdict(False, "shape")
    if not all(G.is_element(c) for row in rows for c in row):
        return Verdict(False, "element")
    scalars = list(tr.relation_rand) + [v for o in tr.outputs for v in o]
    if not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < G.q for v in scalars):
        return Verdict(False, "scalar")
    flipped = [tr.noise[l] for l, s in enumerate(slots) if s.flipped]
    if list(tr.coins) != list(record.coins) or coin_digest(flipped) != record.digest:
        return Verdict(False, "coins")
    if spec.kind == "indep-vbm" and any(c != 1 for s, row in zip(slots, tr.noise) for j, c in enumerate(row)
                                        if j != s.owner):
        return Verdict(False, "foreign share")
    agg = [_product(G, row) for row in tr.noise]
    for rel, rho in zip(rels, tr.relation_rand):
        if not _relation_holds(G, rel, agg, tr.coins, rho):
            return Verdict(False, "relation")
    for j, (y, z) in enumerate(tr.outputs):
        if not _output_holds(G, slots, tr, j, y, z):
            return Verdict(False, "output")
    if check_proofs:
        cs = [_product(G, row) for row in tr.clients] + agg
        ctxs = ([_ctx(tr.session, "client", i) for i in range(len(tr.clients))]
                + [_ctx(tr.session, f"noise-{spec.kind}", l) for l in range(m)])
        if not verify_bit_proofs(G, cs, list(tr.client_proofs) + list(tr.noise_proofs), ctxs, rng):
            return Verdict(False, "proof")
    return Verdict(True, "ok", release(G, spec, tr.outputs))


def _relation_holds(G: Group, rel: Relation, agg: list[int], coins: list[int], rho: int) -> bool:
    # U - T + 2^L beta - R = 0 with u_t = 1 - w_t where the coin is 1; split into Pos = Neg h^rho, no inverses:
    # Pos = prod_{c_t=0} W_t^{2^t} * B^{2^L} * g^{sum_{c_t=1} 2^t}
    # Neg = prod_{c_t=1} W_t^{2^t} * prod_t D_t^{2^t} * g^T
    L = len(rel.u)
    pos_b = [agg[l] for l in rel.u if not coins[l]] + [agg[rel.beta]]
    pos_e = [1 << t for t, l in enumerate(rel.u) if not coins[l]] + [1 << L]
    neg_b = [agg[l] for l in rel.u if coins[l]] + [agg[l] for l in rel.d]
    neg_e = [1 << t for t, l in enumerate(rel.u) if coins[l]] + [1 << t for t in range(L)]
    pos = G.mul(multi_exp(G, pos_b, pos_e), G.fixed_pow(G.g, sum(1 << t for t, l in enumerate(rel.u) if coins[l])))
    neg = G.mul(multi_exp(G, neg_b, neg_e), G.fixed_pow(G.g, rel.threshold))
    return pos == G.mul(neg, G.fixed_pow(G.h, rho))


def _output_holds(G: Group, slots: list[Slot], tr: Transcript, j: int, y: int, z: int) -> bool:
    # prod_i C_ij * prod_l flip(C_lj)^{w_l} = g^y h^z, with flip(C) = g^[j owns l] / C where the coin is 1;
    # terms with a negative exponent move to the right-hand side, so no inverses are needed
    pos_b, pos_e, neg_b, neg_e, const = [row[j] for row in tr.clients], [1] * len(tr.clients), [], [], 0
    for s, c, row in zip(slots, tr.coins, tr.noise):
        if s.weight == 0:
            continue
        w = -s.weight if c else s.weight
        if c and s.owner == j:
            const += s.weight
        (pos_b if w > 0 else neg_b).append(row[j])
        (pos_e if w > 0 else neg_e).append(abs(w))
    lhs = G.mul(multi_exp(G, pos_b, pos_e), G.fixed_pow(G.g, const))
    return lhs == G.mul(multi_exp(G, neg_b, neg_e), commit(G, y, z))


# ----- cheating clients, dealers and provers ---------------------------------------------------------------------
# Each tampering returns what the verifier would then see, (transcript, coin record), or None where the cheat does
# not apply to the run (or would change nothing). A cheat committed before the coins were issued gets a record of
# the cheated commitments; a cheat after them keeps the honest record.


def _simulated_proof(G: Group, c: int, context: bytes, rng: np.random.Generator) -> BitProof:
    """A forgery without a witness: both branches simulated, so the equations hold but the hash does not."""
    e0, e1 = (int.from_bytes(rng.bytes(CHALLENGE_BITS // 8), "big") for _ in range(2))
    z0, z1 = random_scalar(G.q, rng), random_scalar(G.q, rng)
    a0 = G.mul(G.fixed_pow(G.h, z0), G.pow(c, e0))
    a1 = G.mul(G.fixed_pow(G.h, z1), G.pow(G.mul(c, G.g_inv), e1))
    return BitProof(a0, a1, e0, e1, z0, z1)


def _hash_consistent_forgery(G: Group, c: int, context: bytes, rng: np.random.Generator) -> BitProof:
    """A forgery that passes the hash: branch 0 simulated, branch 1 answered without a witness (fails its equation)."""
    e0, z0 = int.from_bytes(rng.bytes(CHALLENGE_BITS // 8), "big"), random_scalar(G.q, rng)
    a0 = G.mul(G.fixed_pow(G.h, z0), G.pow(c, e0))
    a1 = G.fixed_pow(G.h, random_scalar(G.q, rng))
    e1 = (_challenge(G, context, c, a0, a1) - e0) % 2**CHALLENGE_BITS
    return BitProof(a0, a1, e0, e1, z0, random_scalar(G.q, rng))


def _copy(run: Run) -> tuple[Transcript, Openings]:
    return copy.deepcopy(run.transcript), copy.deepcopy(run.openings)


def _refresh_outputs(G: Group, spec: MechanismSpec, tr: Transcript, op: Openings) -> None:
    tr.outputs = [prover_output(G, spec, tr.coins, op, j) for j in range(spec.k)]


def _shift_share(G: Group, tr_rows: list[list[int]], op_rows, row: int, delta: int, j: int = 0) -> None:
    """Add ``delta`` to prover j's share of ``row``, in the opening and in the commitment."""
    v, t = op_rows[row][j]
    op_rows[row][j] = ((v + delta) % G.q, t)
    tr_rows[row][j] = G.mul(tr_rows[row][j], G.fixed_pow(G.g, delta))


def _value(row_openings, q: int) -> int:
    return sum(v for v, _ in row_openings) % q


def _noise_ctx(tr: Transcript, spec: MechanismSpec, l: int) -> bytes:
    return _ctx(tr.session, f"noise-{spec.kind}", l)


def _record_for(run: Run, tr: Transcript) -> CoinRecord:
    """The record a verifier would hold had the cheated commitments been sent before the coins."""
    slots, _, _ = noise_layout(run.spec)
    return CoinRecord(run.record.coins, coin_digest([tr.noise[l] for l, s in enumerate(slots) if s.flipped]))


def _t_client_not_a_bit(G, run, rng):
    """A client submits 5 instead of a bit (votes five times); provers add it honestly; its proof is forged."""
    tr, op = _copy(run)
    _shift_share(G, tr.clients, op.clients, 0, 5 - _value(op.clients[0], G.q))
    tr.client_proofs[0] = _hash_consistent_forgery(G, _product(G, tr.clients[0]), _ctx(tr.session, "client", 0), rng)
    _refresh_outputs(G, run.spec, tr, op)
    return tr, run.record


def _t_noise_not_a_bit(G, run, rng):
    """A noise bit is committed as 40 (shifting the released count) with consistent outputs and a forged proof;
    in sn-vlm the range witness absorbs it, so that only the bit proofs can catch it."""
    tr, op = _copy(run)
    _, rels, _ = noise_layout(run.spec)
    if rels:
        rel = rels[0]
        # beta + 40 and d_0 + 40 * 2^L keep U - T + 2^L beta - R = 0
        _shift_share(G, tr.noise, op.noise, rel.beta, 40)
        _shift_share(G, tr.noise, op.noise, rel.d[0], 40 << len(rel.u))
        forged = [rel.beta, rel.d[0]]
    else:
        _shift_share(G, tr.noise, op.noise, 0, 40 - _value(op.noise[0], G.q))
        forged = [0]
    for l in forged:
        tr.noise_proofs[l] = _hash_consistent_forgery(G, _product(G, tr.noise[l]), _noise_ctx(tr, run.spec, l), rng)
    _refresh_outputs(G, run.spec, tr, op)
    return tr, _record_for(run, tr)


def _t_simulated_proof(G, run, rng):
    """Client 0's proof replaced by a fully simulated one (no witness, so the hash does not match)."""
    tr, _ = _copy(run)
    tr.client_proofs[0] = _simulated_proof(G, _product(G, tr.clients[0]), _ctx(tr.session, "client", 0), rng)
    return tr, run.record


def _t_proof_replay(G, run, rng):
    """Client 0 reuses client 1's valid proof (bound to another context and commitment)."""
    if len(run.transcript.clients) < 2:
        return None
    tr, _ = _copy(run)
    tr.client_proofs[0] = tr.client_proofs[1]
    return tr, run.record


def _t_proof_response(G, run, rng):
    """One response of client 0's proof is altered (the hash still matches, an equation does not)."""
    tr, _ = _copy(run)
    pr = tr.client_proofs[0]
    tr.client_proofs[0] = BitProof(pr.a0, pr.a1, pr.e0, pr.e1, (pr.z0 + 1) % G.q, pr.z1)
    return tr, run.record


def _t_share_shift(G, run, rng):
    """Prover 0 adds 1 to its output share (inflates the count)."""
    tr, _ = _copy(run)
    y, z = tr.outputs[0]
    tr.outputs[0] = ((y + 1) % G.q, z)
    return tr, run.record


def _t_randomness_shift(G, run, rng):
    """Prover 0 reports a wrong randomness share."""
    tr, _ = _copy(run)
    y, z = tr.outputs[0]
    tr.outputs[0] = (y, (z + 1) % G.q)
    return tr, run.record


def _t_drop_noise(G, run, rng):
    """Prover 0 leaves its noise share out of its output."""
    tr, op = _copy(run)
    y = sum(o[0][0] for o in op.clients) % G.q
    z = sum(o[0][1] for o in op.clients) % G.q
    if (y, z) == tr.outputs[0]:
        return None
    tr.outputs[0] = (y, z)
    return tr, run.record


def _t_fresh_noise(G, run, rng):
    """Prover 0 adds noise from fresh, uncommitted coins instead of its committed share."""
    tr, _ = _copy(run)
    y, z = tr.outputs[0]
    tr.outputs[0] = ((y + int(rng.integers(1, 6))) % G.q, z)
    return tr, run.record


def _t_ignore_coins(G, run, rng):
    """The public coins are ignored: vbm provers add unflipped bits; the sn-vlm dealer derives a biased bit from
    unflipped bits (either way whoever chose the bits would choose the noise)."""
    tr, op = _copy(run)
    slots, rels, _ = noise_layout(run.spec)
    zero = [0] * len(tr.coins)
    if not rels:
        tr.outputs = [prover_output(G, run.spec, zero, op, j) for j in range(run.spec.k)]
        return None if tr.outputs == run.transcript.outputs else (tr, run.record)
    i = next((i for i, rel in enumerate(rels) if any(tr.coins[l] for l in rel.u)), None)
    if i is None:
        return None
    rel, L = rels[i], len(rels[i].u)
    u = sum(_value(op.noise[l], G.q) << t for t, l in enumerate(rel.u))
    beta = int(u < rel.threshold)
    r = u - rel.threshold + (beta << L)
    rands = [sum(t for _, t in o) % G.q for o in op.noise]
    for l, v in [(rel.beta, beta)] + [(l, (r >> t) & 1) for t, l in enumerate(rel.d)]:
        tr.noise[l], op.noise[l], rands[l] = _commit_shares(G, v, run.spec.k, rng)
        tr.noise_proofs[l] = prove_bit(G, _product(G, tr.noise[l]), v, rands[l], _noise_ctx(tr, run.spec, l), rng)
    tr.relation_rand[i] = _relation_randomness(rel, rands, zero, G.q)
    _refresh_outputs(G, run.spec, tr, op)
    return tr, run.record


def _t_rewrite_coins(G, run, rng):
    """The transcript reports another coin than the verifier issued, with outputs consistent with it."""
    tr, op = _copy(run)
    slots, _, _ = noise_layout(run.spec)
    tr.coins[next(l for l, s in enumerate(slots) if s.flipped)] ^= 1
    _refresh_outputs(G, run.spec, tr, op)
    return tr, run.record


def _t_change_after_coins(G, run, rng):
    """A committed bit is changed after the coins are out, with a valid bit proof and consistent outputs:
    vbm a fair bit (the coin record no longer matches), sn-vlm a biased bit (the range relation breaks)."""
    tr, op = _copy(run)
    _, rels, _ = noise_layout(run.spec)
    l = rels[0].beta if rels else 0
    v = _value(op.noise[l], G.q)
    _shift_share(G, tr.noise, op.noise, l, 1 - 2 * v)  # slot 0 (vbm) and beta slots belong to prover 0
    r = sum(t for _, t in op.noise[l]) % G.q
    tr.noise_proofs[l] = prove_bit(G, _product(G, tr.noise[l]), 1 - v, r, _noise_ctx(tr, run.spec, l), rng)
    _refresh_outputs(G, run.spec, tr, op)
    return tr, run.record


def _t_swap_outputs(G, run, rng):
    """Provers 0 and 1 swap their outputs (the total is unchanged; each prover's equation is not)."""
    if run.spec.k < 2:
        return None
    tr, _ = _copy(run)
    tr.outputs[0], tr.outputs[1] = tr.outputs[1], tr.outputs[0]
    return tr, run.record


def _t_drop_client(G, run, rng):
    """Prover 0 leaves client 0's share out of its sum (suppresses a vote)."""
    tr, op = _copy(run)
    op.clients[0] = [(0, 0)] * run.spec.k
    tr.outputs[0] = prover_output(G, run.spec, tr.coins, op, 0)
    return tr, run.record


def _t_negated_commitment(G, run, rng):
    """A commitment replaced by ``p - C`` (the same residue up to the order-2 element -1)."""
    tr, _ = _copy(run)
    tr.clients[0][0] = G.p - tr.clients[0][0]
    return tr, run.record


def _t_noncanonical_scalar(G, run, rng):
    """Prover 0 reports ``z + q`` (the same residue, a non-canonical encoding)."""
    tr, _ = _copy(run)
    y, z = tr.outputs[0]
    tr.outputs[0] = (y, z + G.q)
    return tr, run.record


def _t_truncated(G, run, rng):
    """The last noise proof is missing."""
    tr, _ = _copy(run)
    tr.noise_proofs = tr.noise_proofs[:-1]
    return tr, run.record


def _t_relation_rand(G, run, rng):
    """sn-vlm: a range relation is opened with the wrong randomness."""
    if not run.transcript.relation_rand:
        return None
    tr, _ = _copy(run)
    tr.relation_rand[0] = (tr.relation_rand[0] + 1) % G.q
    return tr, run.record


def _t_foreign_share(G, run, rng):
    """indep-vbm: prover 0 moves one unit of its own noise bit into prover 1's share (before the coins)."""
    if run.spec.kind != "indep-vbm" or run.spec.k < 2:
        return None
    tr, op = _copy(run)
    _shift_share(G, tr.noise, op.noise, 0, -1, 0)
    _shift_share(G, tr.noise, op.noise, 0, 1, 1)
    _refresh_outputs(G, run.spec, tr, op)
    return tr, _record_for(run, tr)


# name -> (what the cheater does, the tampering)
TAMPERINGS: dict[str, tuple[str, Callable[[Group, Run, np.random.Generator], tuple[Transcript, CoinRecord] | None]]]
TAMPERINGS = {
    name: (" ".join(fn.__doc__.split()), fn)
    for name, fn in {
        "client not a bit": _t_client_not_a_bit,
        "noise not a bit": _t_noise_not_a_bit,
        "simulated proof": _t_simulated_proof,
        "replayed proof": _t_proof_replay,
        "proof response altered": _t_proof_response,
        "share +1": _t_share_shift,
        "randomness +1": _t_randomness_shift,
        "noise left out": _t_drop_noise,
        "fresh noise": _t_fresh_noise,
        "coins ignored": _t_ignore_coins,
        "coins rewritten": _t_rewrite_coins,
        "bit changed after coins": _t_change_after_coins,
        "outputs swapped": _t_swap_outputs,
        "client left out": _t_drop_client,
        "commitment negated": _t_negated_commitment,
        "non-canonical scalar": _t_noncanonical_scalar,
        "proof missing": _t_truncated,
        "relation opened wrongly": _t_relation_rand,
        "share moved": _t_foreign_share,
    }.items()
}


# ----------------------------------------------------------------------------------------------------- registry

def _registry():
    from paperkit.contracts import Contract, Kernel

    def inputs(rng, size):
        return {"G": modp2048_group(), "m": int(rng.integers(1 << 30)), "r": int(rng.integers(1 << 62))}

    return [Kernel("commitments.commit", commit, commit_ref, inputs, Contract(empty="value",
                   shapes="G: a Group; m, r: integers (mod q)"), tol={"float64": (0, 0)},
                   benchmark="commit (comb tables)", oracle="Python's pow")]


KERNELS = _registry()
