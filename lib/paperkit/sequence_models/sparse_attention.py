"""Single-query decoding attention, dense and sparse, and the budget baselines the halfspace index is set against.

Attention of one query q (d,) over keys K (n, d) and values V (n, dv)::

    out = sum_i w_i v_i,   w = softmax(q.K^T / sqrt(d))

:func:`dense_attention` runs it through torch ``scaled_dot_product_attention`` (FlashAttention's CPU sibling);
:func:`dense_attention_ref` is the plain NumPy reference with the same signature. :func:`subset_attention` is the
same softmax restricted to a set of key ids (the other keys get weight 0).

Budget baselines, each picking at most ``budget`` keys for every decoding step:

* StreamingLLM (Xiao et al.): the first ``n_sink`` tokens plus the most recent ones (:func:`streaming_ids`);
* H2O (Zhang et al.): recent tokens plus "heavy hitters", the keys with the largest attention accumulated over
  past queries; an evicted key never comes back (:class:`H2OCache`);
* Quest (Tang et al.): pages of consecutive keys with a per-page min/max box; the pages with the largest box
  bound sum_j max(q_j lo_j, q_j hi_j) are attended (:func:`quest_ids`). Quest keeps every key, it only reads some.

:func:`synthetic_kv_stream` makes the miniature's decoding workload (see its docstring); :func:`seed_metrics` runs
one workload of the chapter's seed loop (index, Quest, StreamingLLM, H2O at the index's budget), and
:func:`matched_quest_budget` gives Quest the budget at which it touches as much of the cache as the index.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from paperkit.sequence_models import halfspace_index as hsi
from paperkit.timing import speed_ratio


def _check_qkv(q: np.ndarray, K: np.ndarray, V: np.ndarray) -> None:
    if K.ndim != 2 or K.shape[0] < 1:
        raise ValueError(f"K must be a non-empty (n, d) array, got shape {K.shape}")
    if q.shape != (K.shape[1],):
        raise ValueError(f"q must have shape ({K.shape[1]},), got {q.shape}")
    if V.ndim != 2 or V.shape[0] != K.shape[0]:
        raise ValueError(f"V must have shape ({K.shape[0]}, dv), got {V.shape}")
    for name, x in (("q", q), ("K", K), ("V", V)):
        if np.iscomplexobj(x) or not np.issubdtype(np.asarray(x).dtype, np.number):
            raise TypeError(f"{name} must be a real array, got dtype {np.asarray(x).dtype}")
        if not np.all(np.isfinite(x)):
            raise ValueError(f"{name} contains NaN or inf")


def dense_attention(q: np.ndarray, K: np.ndarray, V: np.ndarray) -> np.ndarray:
    """softmax(q K^T / sqrt(d)) V through torch SDPA, in the dtype of ``K``. q (d,), K (n, d), V (n, dv)."""
    _check_qkv(q, K, V)
    qt = torch.from_numpy(np.ascontiguousarray(q, K.dtype)).view(1, 1, 1, -1)
    out = F.scaled_dot_product_attention(qt, torch.from_numpy(K)[None, None], torch.from_numpy(V)[None, None])
    return out.view(-1).numpy()


def _softmax_out(s: np.ndarray, V: np.ndarray) -> np.ndarray:
    # softmax shifted by its max so exp never overflows
    w = np.exp(s - s.max())
    return (w / w.sum()) @ V


def dense_attention_ref(q: np.ndarray, K: np.ndarray, V: np.ndarray) -> np.ndarray:
    """Plain reference of :func:`dense_attention` (same signature), computed in float64."""
    _check_qkv(q, K, V)
    K64 = K.astype(np.float64)
    # s_i = q.k_i / sqrt(d)
    s = K64 @ np.asarray(q, np.float64) / np.sqrt(K.shape[1])
    return _softmax_out(s, V.astype(np.float64))


def subset_attention(q: np.ndarray, K: np.ndarray, V: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Attention of q over the keys ``ids`` only (float64); zeros when ``ids`` is empty."""
    _check_qkv(q, K, V)
    ids = np.asarray(ids)
    if ids.size and not np.issubdtype(ids.dtype, np.integer):
        # a boolean mask would read as ids 0 and 1, float ids would be truncated
        raise TypeError(f"ids must be integer key positions, got dtype {ids.dtype} (use np.flatnonzero for a mask)")
    ids = ids.astype(np.int64).reshape(-1)
    if np.unique(ids).size != ids.size:
        raise ValueError("ids must not repeat a key (a duplicate would count its attention twice)")
    if ids.size and (ids.min() < 0 or ids.max() >= K.shape[0]):
        raise ValueError(f"ids must lie in [0, {K.shape[0]}), got range [{ids.min()}, {ids.max()}]")
    if ids.size == 0:
        return np.zeros(V.shape[1])
    s = K[ids].astype(np.float64) @ np.asarray(q, np.float64) / np.sqrt(K.shape[1])
    return _softmax_out(s, V[ids].astype(np.float64))


def streaming_ids(n: int, budget: int, n_sink: int = 4) -> np.ndarray:
    """StreamingLLM's keys among n: the first ``n_sink`` (attention sinks) and the last ``budget - n_sink``."""
    if n < 1 or budget < n_sink + 1 or n_sink < 0:
        raise ValueError(f"need n >= 1 and budget > n_sink >= 0, got n={n}, budget={budget}, n_sink={n_sink}")
    if n <= budget:
        return np.arange(n)
    return np.concatenate([np.arange(n_sink), np.arange(n - (budget - n_sink), n)])


class H2OCache:
    """H2O-style eviction: keep the ``recent`` newest keys plus the ``budget - recent`` keys with the largest
    attention accumulated over all queries seen so far; a key evicted once is gone for good.

    ``prefill(acc)`` sets the accumulated attention of the n prefix keys (from prefill queries) and keeps the
    best; ``step(q, K, V, n)`` (K, V: the first n rows are the cache, the newest last) attends over the kept
    keys, adds the attention weights to their scores, evicts down to the budget and returns (ids, out).
    """

    def __init__(self, budget: int, recent: int):
        if budget < 2 or not 1 <= recent < budget:
            raise ValueError(f"need budget >= 2 and 1 <= recent < budget, got budget={budget}, recent={recent}")
        self.budget, self.recent = budget, recent
        self.ids = np.zeros(0, np.int64)
        self.acc = np.zeros(0)

    def prefill(self, acc: np.ndarray) -> None:
        acc = np.asarray(acc, np.float64)
        if acc.ndim != 1 or acc.size < 1:
            raise ValueError(f"acc must be a non-empty 1-d array, got shape {acc.shape}")
        self.ids, self.acc = np.arange(acc.size), acc.copy()
        self._evict(acc.size)

    def _evict(self, n: int) -> None:
        old = self.ids < n - self.recent
        n_heavy = self.budget - int((~old).sum())
        if old.sum() <= n_heavy:
            return
        old_pos = np.flatnonzero(old)
        drop = old_pos[np.argsort(self.acc[old_pos], kind="stable")[: old.sum() - n_heavy]]
        keep = np.ones(self.ids.size, bool)
        keep[drop] = False
        self.ids, self.acc = self.ids[keep], self.acc[keep]

    def step(self, q: np.ndarray, K: np.ndarray, V: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
        new = np.arange(self.ids[-1] + 1 if self.ids.size else 0, n)
        self.ids = np.concatenate([self.ids, new])
        self.acc = np.concatenate([self.acc, np.zeros(new.size)])
        s = K[self.ids].astype(np.float64) @ np.asarray(q, np.float64) / np.sqrt(K.shape[1])
        w = np.exp(s - s.max())
        w /= w.sum()
        out = w @ V[self.ids].astype(np.float64)
        self.acc += w
        ids = self.ids.copy()
        self._evict(n)
        return ids, out


def page_boxes(K: np.ndarray, page: int) -> tuple[np.ndarray, np.ndarray]:
    """Quest's per-page boxes: (lo, hi), each (ceil(n / page), d), over consecutive runs of ``page`` keys."""
    if page < 1:
        raise ValueError(f"page must be >= 1, got {page}")
    starts = np.arange(0, K.shape[0], page)
    return np.minimum.reduceat(K, starts, axis=0), np.maximum.reduceat(K, starts, axis=0)


def quest_ids(q: np.ndarray, lo: np.ndarray, hi: np.ndarray, n: int, budget: int, page: int) -> np.ndarray:
    """Quest's keys: the ``budget // page`` pages (of the n keys) with the largest box bound on q.k."""
    if budget < page:
        raise ValueError(f"budget must be >= page={page}, got {budget}")
    q = np.asarray(q, np.float64)
    # upper bound of q.k over a page's box: sum_j max(q_j lo_j, q_j hi_j)
    ub = np.maximum(lo * q, hi * q).sum(axis=1)
    n_pages = min(budget // page, len(ub))
    top = np.argpartition(-ub, n_pages - 1)[:n_pages]
    ids = (top[:, None] * page + np.arange(page)).ravel()
    return np.sort(ids[ids < n])


@dataclass(frozen=True)
class KVStream:
    """A decoding run: ``K`` (n + steps, d), ``V`` (n + steps, d) where rows [:n] are the prompt's cache and row
    n + t is appended at decoding step t, before query ``Q[t]``. ``warmup_Q`` (w, d): queries of the prompt
    (for calibration and H2O's prefill). ``critical`` (c,): ids of the critical keys; ``critical_on``
    (steps, c): whether critical key j is being asked for at step t."""

    K: np.ndarray
    V: np.ndarray
    Q: np.ndarray
    warmup_Q: np.ndarray
    n_prompt: int
    critical: np.ndarray
    critical_on: np.ndarray


def synthetic_kv_stream(n_prompt: int, d: int, steps: int, rng: np.random.Generator, *, n_topics: int = 64,
                        n_critical: int = 16, focus: float = 22.0, spread: float = 0.25,
                        critical_logit: float = 25.0, critical_pull: float = 10.0, active_steps: int = 8,
                        segment: int = 64, topic_steps: int = 25, n_warmup: int = 64, drift_step: float = 0.01,
                        warmup_reads: float = 0.0, dtype=np.float32) -> KVStream:
    """A clustered prompt cache, then a decoding run on new topics with critical keys that turn relevant late.

    Keys: topic centres mu_c have norm sqrt(d) and live in the first d - d/4 coordinates; the prompt is a
    sequence of topic segments (mean length ``segment``, topics from ``n_topics``) and a key of topic c is
    mu_c + spread * eps, eps ~ N(0, I_d). ``n_critical`` keys in the middle of the prompt are instead c * u_j,
    u_j random unit vectors in the last d/4 coordinates (orthogonal to every topic), with
    c = critical_logit * sqrt(d) / 10 so that a pull of 10 gives that logit. Values: N(0, I_d).
    Decoding: every ``topic_steps`` steps the text moves to a new topic (absent from the prompt); step t appends
    a key of the current topic, then queries with q_t = focus * (mu / sqrt(d) + drift_t), drift_t a slow AR(1)
    walk. While critical key j is active (``active_steps`` steps from a random start) q_t also gets
    critical_pull * u_j. Logits q.k / sqrt(d): about ``focus`` for current-topic keys, about
    critical_pull * c / sqrt(d) (= ``critical_logit`` at the default pull) for an active critical key, about
    focus * cos(topic, other topic), i.e. spread around 0 with standard deviation about focus / sqrt(3d/4), for
    keys of other topics, and about 0 for a critical key nobody asks for.
    ``warmup_Q`` are prompt-time queries (topics of the prompt) for H2O's prefill. With ``warmup_reads`` = 0 they
    never ask for a critical key, so accumulated attention has no reason to keep one; with ``warmup_reads`` > 0,
    warm-up query i also gets warmup_reads * u_j for every critical key j with i mod n_critical = j mod n_warmup
    (each critical key is read by at least one prompt-time query; at 16 keys and 64 queries, by four). The reads
    are deterministic: the generator draws exactly the same numbers, so K, V, Q and the critical schedule do not
    depend on ``warmup_reads``.
    """
    sizes = {"n_prompt": n_prompt, "d": d, "steps": steps, "n_topics": n_topics, "segment": segment,
             "topic_steps": topic_steps, "active_steps": active_steps, "n_warmup": n_warmup}
    for name, v in sizes.items():
        if v < 1:
            raise ValueError(f"{name} must be >= 1, got {v}")
    if not 0 <= n_critical <= n_prompt // 2:
        raise ValueError(f"n_critical must be in [0, n_prompt // 2], got {n_critical}")
    if not (np.isfinite(warmup_reads) and warmup_reads >= 0):
        raise ValueError(f"warmup_reads must be a finite number >= 0, got {warmup_reads}")
    n_fresh = steps // topic_steps + 1
    # topics use the first d - d // 4 coordinates, critical keys the last d // 4: an old critical key says
    # nothing about any topic, so nothing but the decoder's later need for it can make it relevant again
    d_crit = max(1, d // 4)
    mu = np.zeros((n_topics + n_fresh, d))
    mu[:, : d - d_crit] = rng.standard_normal((n_topics + n_fresh, d - d_crit))
    mu *= np.sqrt(d) / np.linalg.norm(mu, axis=1, keepdims=True)  # every topic equally loud
    seg_len = rng.geometric(1.0 / segment, size=n_prompt)  # more segments than needed, cut below
    topic = np.repeat(rng.integers(n_topics, size=n_prompt), seg_len)[:n_prompt]
    K_prompt = mu[topic] + spread * rng.standard_normal((n_prompt, d))
    critical = np.sort(rng.choice(np.arange(n_prompt // 8, n_prompt - n_prompt // 8), n_critical, replace=False))
    u = np.zeros((n_critical, d))
    u[:, d - d_crit:] = rng.standard_normal((n_critical, d_crit))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    K_prompt[critical] = critical_logit * np.sqrt(d) / 10.0 * u

    def queries(t_topic: np.ndarray) -> np.ndarray:
        # drift: AR(1) walk, a slow wobble of the query around its topic's direction
        drift = np.zeros((t_topic.size, d))
        for t in range(1, t_topic.size):
            drift[t] = 0.9 * drift[t - 1] + drift_step * rng.standard_normal(d)
        return focus * (mu[t_topic] / np.sqrt(d) + drift)

    warmup_Q = queries(np.repeat(rng.integers(n_topics, size=8), -(-n_warmup // 8))[:n_warmup])
    if warmup_reads > 0 and n_critical > 0:
        i, j = np.arange(n_warmup)[:, None], np.arange(n_critical)[None, :]
        warmup_Q = warmup_Q + warmup_reads * (i % n_critical == j % n_warmup).astype(np.float64) @ u
    q_topic = n_topics + np.arange(steps) // topic_steps
    on = np.zeros((steps, n_critical), bool)
    t0 = rng.integers(0, max(1, steps - active_steps), size=n_critical)
    for j in range(n_critical):
        on[t0[j]: t0[j] + active_steps, j] = True
    Q = queries(q_topic) + critical_pull * on.astype(np.float64) @ u
    K_new = mu[q_topic] + spread * rng.standard_normal((steps, d))
    K = np.concatenate([K_prompt, K_new]).astype(dtype)
    V = rng.standard_normal((n_prompt + steps, d)).astype(dtype)
    return KVStream(K, V, Q, warmup_Q, n_prompt, critical, on)


@dataclass(frozen=True)
class DensePass:
    """The exact decoding run, per step t: ``out`` (steps, dv) dense attention output (float64);
    ``above`` list of the ids with q.k >= tau (brute force); ``mass_below`` (steps,) softmax mass of the keys
    with q.k < tau; ``vmax`` (steps,) max_i ||v_i|| over the cache."""

    out: np.ndarray
    above: list
    mass_below: np.ndarray
    vmax: np.ndarray


def dense_pass(stream: KVStream, tau: float) -> DensePass:
    """Exact attention at every decoding step of ``stream`` (key n + t appended before query t), in float64
    as in :func:`dense_attention_ref`, and the brute-force halfspace {k : q.k >= tau}."""
    n, steps = stream.n_prompt, len(stream.Q)
    K = stream.K.astype(np.float64)
    V = stream.V.astype(np.float64)
    vnorm = np.maximum.accumulate(np.linalg.norm(V, axis=1))
    out, above, mass = np.zeros((steps, V.shape[1])), [], np.zeros(steps)
    for t in range(steps):
        m, q = n + t + 1, stream.Q[t]
        s = K[:m] @ q
        # softmax(q.K^T / sqrt(d)), shifted by its max
        w = np.exp((s - s.max()) / np.sqrt(K.shape[1]))
        out[t] = w @ V[:m] / w.sum()
        above.append(np.flatnonzero(s >= tau))
        mass[t] = w[s < tau].sum() / w.sum()
    return DensePass(out, above, mass, vnorm[n: n + steps])


def decode_with_index(stream: KVStream, tau: float, index: hsi.HalfspaceIndex, dense: DensePass,
                      compare_bounds: bool = True) -> dict[str, np.ndarray]:
    """Decode ``stream`` with the halfspace index (built on the prompt; each new key is inserted before its
    query). Per step: ``err`` ||out_index - out_dense||; ``bound`` 2 max||v|| * mass below tau; ``false_neg``
    / ``extra`` keys missed / returned in excess against brute force; counts ``returned``, ``scanned``,
    ``clusters``, ``pruned``; with ``compare_bounds``, ``scanned_ball`` / ``scanned_box``: keys the index would
    have scanned with one of its two bounds only (two more queries per step)."""
    n, steps = stream.n_prompt, len(stream.Q)
    if index.n != n:
        raise ValueError(f"index must hold the {n} prompt keys, holds {index.n}")
    rec = {k: np.zeros(steps) for k in ("err", "bound", "false_neg", "extra", "returned", "scanned", "clusters",
                                        "pruned", "scanned_ball", "scanned_box")}
    for t in range(steps):
        hsi.insert(index, stream.K[n + t])
        q, truth = stream.Q[t], dense.above[t]
        r = hsi.query(index, q, tau)
        out = subset_attention(q, stream.K[: n + t + 1], stream.V[: n + t + 1], r.ids)
        rec["err"][t] = np.linalg.norm(out - dense.out[t])
        # ||out_index - out_dense|| <= 2 max_i ||v_i|| * (softmax mass of the keys with q.k < tau)
        rec["bound"][t] = 2.0 * dense.vmax[t] * dense.mass_below[t]
        rec["false_neg"][t] = np.setdiff1d(truth, r.ids).size
        rec["extra"][t] = np.setdiff1d(r.ids, truth).size
        if compare_bounds:
            rec["scanned_ball"][t] = hsi.query(index, q, tau, bound="ball").keys_scanned
            rec["scanned_box"][t] = hsi.query(index, q, tau, bound="box").keys_scanned
        rec["returned"][t], rec["scanned"][t], rec["pruned"][t] = r.ids.size, r.keys_scanned, r.clusters_pruned
        rec["clusters"][t] = index.n_clusters
    return rec


def h2o_prefill_scores(warmup_Q: np.ndarray, K_prompt: np.ndarray) -> np.ndarray:
    """Attention accumulated by each prompt key over the prompt's queries (H2O's heavy-hitter score), (n,)."""
    s = warmup_Q @ K_prompt.astype(np.float64).T / np.sqrt(K_prompt.shape[1])
    w = np.exp(s - s.max(axis=1, keepdims=True))
    return (w / w.sum(axis=1, keepdims=True)).sum(axis=0)


BUDGET_METHODS = ("StreamingLLM", "H2O", "Quest")


def decode_with_budget(stream: KVStream, method: str, budget: int, dense: DensePass,
                       page: int = 16) -> dict[str, np.ndarray]:
    """Decode ``stream`` with a budget baseline (``BUDGET_METHODS``) keeping ``budget`` keys per step.
    Per step: ``err`` ||out - out_dense||; ``recall`` share of the keys with q.k >= tau that were attended;
    ``missed`` the number of those keys not attended (false negatives); ``dropped`` active critical keys not
    attended; ``touched`` keys read (Quest also reads its page boxes)."""
    if method not in BUDGET_METHODS:
        raise ValueError(f"method must be one of {BUDGET_METHODS}, got {method!r}")
    n, steps = stream.n_prompt, len(stream.Q)
    K, V = stream.K, stream.V
    rec = {k: np.zeros(steps) for k in ("err", "recall", "missed", "dropped", "touched")}
    if method == "H2O":
        cache = H2OCache(budget, budget // 2)
        cache.prefill(h2o_prefill_scores(stream.warmup_Q, K[:n]))
    if method == "Quest":
        lo, hi = page_boxes(K[:n], page)
    for t in range(steps):
        m, q = n + t + 1, stream.Q[t]
        if method == "StreamingLLM":
            ids = streaming_ids(m, budget)
            out = subset_attention(q, K[:m], V[:m], ids)
        elif method == "H2O":
            ids, out = cache.step(q, K, V, m)
        else:
            if (m - 1) % page == 0:  # the new key opens a page
                lo, hi = np.concatenate([lo, K[m - 1: m]]), np.concatenate([hi, K[m - 1: m]])
            else:
                lo[-1], hi[-1] = np.minimum(lo[-1], K[m - 1]), np.maximum(hi[-1], K[m - 1])
            ids = quest_ids(q, lo, hi, m, budget, page)
            out = subset_attention(q, K[:m], V[:m], ids)
        truth = dense.above[t]
        rec["err"][t] = np.linalg.norm(out - dense.out[t])
        rec["recall"][t] = np.isin(truth, ids).mean() if truth.size else 1.0
        rec["missed"][t] = (~np.isin(truth, ids)).sum()
        rec["dropped"][t] = (~np.isin(stream.critical[stream.critical_on[t]], ids)).sum()
        rec["touched"][t] = ids.size + (len(lo) if method == "Quest" else 0)
    return rec


def matched_quest_budget(index_touched: float, cache_mean: float, page: int = 16) -> int:
    """The Quest key budget (a multiple of ``page``, at least one page) whose keys plus page boxes per step
    (cache_mean / page boxes) come closest to, without exceeding, ``index_touched`` reads per step (the index's
    keys scanned plus cluster bounds). At least one page even when the boxes alone exceed it."""
    if page < 1 or index_touched < 0 or cache_mean < 1:
        raise ValueError(f"need page >= 1, index_touched >= 0, cache_mean >= 1; got {page}, {index_touched}, "
                         f"{cache_mean}")
    return int(page * max(1, np.floor((index_touched - np.ceil(cache_mean / page)) / page)))


def seed_metrics(n: int, d: int, steps: int, tau: float, rng: np.random.Generator, n_clusters: int,
                 n_critical: int = 16, warmup_reads: float = 10.0, page: int = 16) -> dict[str, float]:
    """One seed of the chapter's comparison at a fresh :func:`synthetic_kv_stream` (stream and k-means drawn
    from ``rng``): the index decodes it; every baseline gets the index's budget (keys scanned per step, on
    average, at least 32). Returns the index's ``false_neg`` (keys missed plus keys returned in excess against
    brute force, summed), its worst step error ``err_index`` and its share of the cache ``touched`` (keys scanned
    + cluster bounds, mean over steps); the ``budget``; the worst errors ``err_streaming`` and ``err_h2o`` of
    StreamingLLM and H2O at that budget; Quest's ``quest_missed`` keys above tau (summed) and worst error
    ``err_quest`` at that budget, and its worst error ``err_quest_matched`` at :func:`matched_quest_budget`; the
    worst error ``err_h2o_read`` of H2O when the prompt-time queries read the critical keys (``warmup_reads``;
    same K, V, Q)."""
    stream_seed = int(rng.integers(2**62))
    stream = synthetic_kv_stream(n, d, steps, np.random.default_rng(stream_seed), n_critical=n_critical)
    read = synthetic_kv_stream(n, d, steps, np.random.default_rng(stream_seed), n_critical=n_critical,
                               warmup_reads=warmup_reads)
    dense = dense_pass(stream, tau)
    run = decode_with_index(stream, tau, hsi.build_index(stream.K[:n], n_clusters, rng), dense,
                            compare_bounds=False)
    cache = n + np.arange(1, steps + 1)
    touched = float(np.mean((run["scanned"] + run["clusters"]) / cache))
    budget = max(32, int(np.ceil(run["scanned"].mean())))
    quest = decode_with_budget(stream, "Quest", budget, dense, page)
    matched = matched_quest_budget(float(np.mean(run["scanned"] + run["clusters"])), float(cache.mean()), page)
    quest_m = decode_with_budget(stream, "Quest", matched, dense, page)
    h2o_read = decode_with_budget(read, "H2O", budget, dense, page)
    streaming = decode_with_budget(stream, "StreamingLLM", budget, dense, page)
    h2o = decode_with_budget(stream, "H2O", budget, dense, page)
    return {"false_neg": float(run["false_neg"].sum() + run["extra"].sum()), "err_index": float(run["err"].max()),
            "err_streaming": float(streaming["err"].max()), "err_h2o": float(h2o["err"].max()),
            "touched": touched, "budget": float(budget), "quest_missed": float(quest["missed"].sum()),
            "err_quest": float(quest["err"].max()), "err_quest_matched": float(quest_m["err"].max()),
            "err_h2o_read": float(h2o_read["err"].max())}


def index_speed(n: int, d: int, rng: np.random.Generator, n_clusters: int, tau_logit: float = 12.0,
                steps: int = 200, n_queries: int = 50, repeats: int = 5) -> dict:
    """Wall time per decoding query on a :func:`synthetic_kv_stream` cache of n prompt keys plus ``steps``
    inserted ones: the index (``n_clusters`` clusters; query, then attention over the keys it returns) against
    dense torch SDPA and against the brute-force reference query (then the same attention). Keys float32 as in
    LLM inference. Returns the two ratios (> 1: the index is faster), the median times per query in seconds,
    and the mean fraction of keys the index scanned."""
    stream = synthetic_kv_stream(n, d, steps, rng)
    index = hsi.build_index(stream.K[:n], n_clusters, rng)
    for t in range(steps):
        hsi.insert(index, stream.K[n + t])
    K, V = stream.K, stream.V
    tau = tau_logit * np.sqrt(d)
    queries = stream.Q[:: max(1, steps // n_queries)][:n_queries]

    def with_index():
        for q in queries:
            subset_attention(q, K, V, hsi.query(index, q, tau).ids)

    def with_brute_force():
        for q in queries:
            subset_attention(q, K, V, hsi.query_ref(index, q, tau).ids)

    def dense():
        for q in queries:
            dense_attention(q, K, V)

    vs_dense = speed_ratio(with_index, dense, repeats=repeats)
    vs_brute = speed_ratio(with_index, with_brute_force, repeats=repeats)
    scanned = np.mean([hsi.query(index, q, tau).keys_scanned for q in queries]) / len(K)
    m = len(queries)
    return {"n": len(K), "ratio_dense": vs_dense.ratio, "ratio_brute": vs_brute.ratio,
            "t_index": vs_dense.t_candidate_s / m, "t_dense": vs_dense.t_baseline_s / m,
            "t_brute": vs_brute.t_baseline_s / m, "scanned": float(scanned)}


# ----------------------------------------------------------------------------------------------------- registry

def _registry():
    from paperkit.contracts import Arg, Contract, Kernel

    def inputs(rng, size):
        return {"q": rng.normal(size=4), "K": rng.normal(size=(max(size, 1), 4)), "V": rng.normal(size=(max(size, 1), 3))}

    return [Kernel("sparse_attention.dense_attention", dense_attention, dense_attention_ref, inputs,
                   Contract(args=(Arg("q", ndim=1), Arg("K", ndim=2), Arg("V", ndim=2)), empty="value",
                            shapes="q: (d,), K: (n, d), V: (n, dv)"),
                   tol={"float64": (1e-10, 1e-12)}, oracle="torch SDPA")]


KERNELS = _registry()
