"""numba kernels of the inverted index: segment build and blocked top-k search.

Layout of one segment (n docs, vocabulary size V), see segment.py for the arrays:

* every posting carries a uint8 *code* (weight quantised per term, ``code * scale[t] ~ w``, present
  weights never round to 0), so scoring streams 1 byte per posting instead of 4;
* terms in at least ``dense_min_df`` docs are stored as a dense code column over all n docs (no doc
  ids; SIMD friendly), the others as (doc id, code) posting lists sorted by doc id;
* the exact float32 doc vectors stay in a forward CSR store.

Search walks the docs in chunks of CHUNK (accumulator stays in L1/L2), scatters the sparse lists,
adds the dense columns per BLOCK-doc block, skips blocks whose upper bound (block max of the scattered
part + block-max codes of the dense columns) cannot reach the running threshold, and keeps every doc
whose quantised score is within ``2 * err`` of the k-th best quantised score, where ``err`` bounds the
quantisation error of one doc's score. Those candidates are rescored exactly from the forward store,
so exact mode returns the exact top-k (proof in search_one's comment), not an approximation of it.
Approximate mode runs the same loop with a cut query (cut_row), no error window and a larger heap
(``rerank``): exactly the rerank best quantised scores are rescored with the full query. Its first
pass scores in uint16 with integer query weights (search_one_u16), which needs no error bound.
"""
from __future__ import annotations

import numpy as np
from numba import njit

CHUNK = 16384  # docs per accumulator chunk: 64 KiB of float32, L2 resident
BLOCK = 64  # docs per block-max block (one cache line of codes per dense column)
SUB = 512  # docs per selection sub-chunk
PIECE = 64  # docs per selection piece inside a sub-chunk
NO_THRESHOLD = -np.inf


# ----------------------------------------------------------------------------- build
@njit(cache=True, nogil=True)
def check_rows(indptr, indices, values):
    """-1 if every row has strictly increasing dims and finite weights >= 0, else the bad row."""
    for i in range(len(indptr) - 1):
        for p in range(indptr[i], indptr[i + 1]):
            v = values[p]
            if not (v >= 0.0 and v < np.inf):
                return i
            if p > indptr[i] and indices[p] <= indices[p - 1]:
                return i
    return -1


@njit(cache=True, nogil=True)
def term_stats(indptr, indices, values, dim, top_n):
    """Per-term doc frequency and max weight; with top_n > 0 also the df of each doc's top-n part.

    Returns (df, wmax, df_main, is_main) where is_main marks the postings that go to the main lists
    (all of them when top_n <= 0; otherwise each doc's top_n heaviest, ties to the smaller dim).
    """
    n = len(indptr) - 1
    df = np.zeros(dim, np.int64)
    df_main = np.zeros(dim, np.int64)
    wmax = np.zeros(dim, np.float32)
    is_main = np.ones(len(indices), np.bool_)
    for i in range(n):
        a, b = indptr[i], indptr[i + 1]
        if top_n > 0 and b - a > top_n:
            order = np.argsort(-values[a:b], kind="mergesort")
            for r in range(top_n, b - a):
                is_main[a + order[r]] = False
        for p in range(a, b):
            v = values[p]
            if v <= 0.0:
                is_main[p] = False
                continue
            t = indices[p]
            df[t] += 1
            if is_main[p]:
                df_main[t] += 1
            if v > wmax[t]:
                wmax[t] = v
    return df, wmax, df_main, is_main


@njit(cache=True, nogil=True)
def encode(v, inv_scale):
    """uint8 code of weight v > 0 for a term with scale 1 / inv_scale: round to nearest, never 0."""
    c = np.int64(v * inv_scale + 0.5)
    if c < 1:
        c = 1
    if c > 255:
        c = 255
    return np.uint8(c)


@njit(cache=True, nogil=True)
def fill_postings(indptr, indices, values, scale, is_main, dense_slot, n_dense,
                  main_ptr, res_ptr):
    """Scatter the forward CSR into posting lists (doc-sorted), dense columns and block maxima."""
    n = len(indptr) - 1
    main_docs = np.empty(main_ptr[-1], np.int32)
    main_codes = np.empty(main_ptr[-1], np.uint8)
    res_docs = np.empty(res_ptr[-1], np.int32)
    res_codes = np.empty(res_ptr[-1], np.uint8)
    dense = np.zeros((n_dense, n), np.uint8)
    nblocks = (n + BLOCK - 1) // BLOCK
    bmax = np.zeros((n_dense, nblocks), np.uint8)
    mpos = main_ptr[:-1].copy()
    rpos = res_ptr[:-1].copy()
    inv = np.zeros(len(scale), np.float32)
    for t in range(len(scale)):
        if scale[t] > 0:
            inv[t] = np.float32(1.0) / scale[t]
    for i in range(n):
        blk = i // BLOCK
        for p in range(indptr[i], indptr[i + 1]):
            v = values[p]
            if v <= 0.0:
                continue
            t = indices[p]
            c = encode(v, inv[t])
            if is_main[p]:
                s = dense_slot[t]
                if s >= 0:
                    dense[s, i] = c
                    if c > bmax[s, blk]:
                        bmax[s, blk] = c
                else:
                    main_docs[mpos[t]] = i
                    main_codes[mpos[t]] = c
                    mpos[t] += 1
            else:
                res_docs[rpos[t]] = i
                res_codes[rpos[t]] = c
                rpos[t] += 1
    return main_docs, main_codes, res_docs, res_codes, dense, bmax


# ----------------------------------------------------------------------------- search
@njit(cache=True, nogil=True)
def _heap_push(heap, size, cap, s):
    """Min-heap of the best `cap` quantised scores; returns the new size."""
    if size < cap:
        j = size
        heap[j] = s
        size += 1
        while j > 0:
            parent = (j - 1) // 2
            if heap[parent] <= heap[j]:
                break
            heap[parent], heap[j] = heap[j], heap[parent]
            j = parent
        return size
    if s <= heap[0]:
        return size
    heap[0] = s
    j = 0
    while True:
        left = 2 * j + 1
        if left >= size:
            break
        m = left
        if left + 1 < size and heap[left + 1] < heap[left]:
            m = left + 1
        if heap[j] <= heap[m]:
            break
        heap[j], heap[m] = heap[m], heap[j]
        j = m
    return size


@njit(cache=True, nogil=True)
def search_one(q_idx, q_val, f_idx, f_val, k, cap, alpha, use_res, window, mask, has_mask,
               df, scale, dense_slot, dense, bmax, main_ptr, main_docs, main_codes,
               res_ptr, res_docs, res_codes, fwd_indptr, fwd_indices, fwd_values,
               qdense, acc, out_docs, out_scores):
    """Top-k of one query over one segment; writes out_docs/out_scores[:m] and returns m.

    q_idx/q_val: the terms that generate candidates (maybe cut); f_idx/f_val: the full query used
    for exact rescoring. cap >= k is the size of the quantised-score heap (more candidates rescored).
    alpha in (0, 1]: a block is skipped when its bound is below threshold / alpha (1 = safe).
    window: 2.0 keeps every doc within 2 err of the cap-th quantised score (exact mode, proof below);
    0.0 keeps only the cap best quantised scores (approx mode: its rerank knob is exactly cap).

    Why exact: let t be the cap-th best quantised score at the end and err the largest
    |quantised - exact| of any doc (sum over query terms of q * scale). The cap >= k docs in the heap
    have exact scores >= t - err, so the true k-th exact score is >= t - err, and any doc of the
    true top-k has a quantised score >= t - 2 err = the final threshold. The running threshold only
    grows towards it, so such a doc was kept as a candidate and survives. Skipped blocks are bounded
    below the running threshold. Candidates are then ranked by their exact score (ties: doc id).
    """
    n = len(fwd_indptr) - 1
    nq = len(q_idx)
    # split the query terms into sparse lists and dense columns; drop terms absent here
    sp_t = np.empty(2 * nq, np.int64)
    sp_w = np.empty(2 * nq, np.float32)
    sp_pos = np.empty(2 * nq, np.int64)
    sp_end = np.empty(2 * nq, np.int64)
    sp_res = np.zeros(2 * nq, np.bool_)
    dn_slot = np.empty(nq, np.int64)
    dn_w = np.empty(nq, np.float32)
    n_sp = 0
    n_dn = 0
    err = 0.0
    bound = 0.0
    for j in range(nq):
        t = q_idx[j]
        w = q_val[j]
        if w <= 0.0 or df[t] == 0:
            continue
        qs = w * scale[t]
        err += qs
        bound += qs * 255.0
        if dense_slot[t] >= 0:
            dn_slot[n_dn] = dense_slot[t]
            dn_w[n_dn] = qs
            n_dn += 1
        elif main_ptr[t + 1] > main_ptr[t]:
            sp_t[n_sp] = t
            sp_w[n_sp] = qs
            sp_pos[n_sp] = main_ptr[t]
            sp_end[n_sp] = main_ptr[t + 1]
            n_sp += 1
        if use_res and res_ptr[t + 1] > res_ptr[t]:
            sp_t[n_sp] = t
            sp_w[n_sp] = qs
            sp_pos[n_sp] = res_ptr[t]
            sp_end[n_sp] = res_ptr[t + 1]
            sp_res[n_sp] = True
            n_sp += 1
    if n_sp == 0 and n_dn == 0:
        return 0
    # float32 accumulation slack on top of the quantisation bound
    err = err * 1.0001 + bound * 1e-5
    heap = np.empty(cap, np.float32)
    hsize = 0
    thr = np.float32(NO_THRESHOLD)
    cand_cap = max(1024, 4 * cap)
    c_doc = np.empty(cand_cap, np.int64)
    c_s = np.empty(cand_cap, np.float32)
    nc = 0
    chunk_start = np.empty(2 * nq, np.int64)
    inv_alpha = 1.0 / alpha
    nblk_chunk = (CHUNK + BLOCK - 1) // BLOCK
    run0 = np.empty(nblk_chunk, np.int64)  # doc ranges of the chunk's scored (unskipped) blocks
    run1 = np.empty(nblk_chunk, np.int64)
    ub = np.zeros(nblk_chunk, np.float32)
    bits_scratch = np.zeros(1, np.float32)
    # Loops below index through slices starting at 0: numba cannot vectorise acc[c0 + j] because of
    # negative-index wraparound, and a scalar loop over 1M docs costs more than the whole query.
    for c0 in range(0, n, CHUNK):
        c1 = min(n, c0 + CHUNK)
        width = c1 - c0
        a = acc[:width]
        # 1) scatter the sparse lists of this chunk
        cnt = 0
        sp_max = np.float32(0.0)  # max of the scattered part (numba's array.max() is a slow scalar loop)
        for i in range(n_sp):
            p = sp_pos[i]
            e = sp_end[i]
            chunk_start[i] = p
            w = sp_w[i]
            docs = res_docs if sp_res[i] else main_docs
            codes = res_codes if sp_res[i] else main_codes
            while p < e and docs[p] < c1:
                x = np.uintp(docs[p] - c0)
                v = a[x] + w * np.float32(codes[p])
                a[x] = v
                if v > sp_max:
                    sp_max = v
                p += 1
            cnt += p - sp_pos[i]
            sp_pos[i] = p
        if n_dn == 0:
            if cnt == 0:
                continue
            if cnt * 8 < width:
                # few postings: select over the touched docs only (a reset marks a doc as done)
                for i in range(n_sp):
                    docs = res_docs if sp_res[i] else main_docs
                    for p in range(chunk_start[i], sp_pos[i]):
                        d = docs[p]
                        s = a[np.uintp(d - c0)]
                        if s == 0.0:
                            continue
                        a[np.uintp(d - c0)] = 0.0
                        if s < thr or (has_mask and mask[d] == 0):
                            continue
                        c_doc, c_s, nc, cand_cap, hsize = _add_candidate(
                            c_doc, c_s, nc, cand_cap, thr, heap, hsize, cap, d, s)
                        if hsize == cap:
                            thr = np.float32(heap[0] - window * err)
                continue
        # 2) block bounds (block-max codes of the dense columns + the chunk max of the scattered
        # part): skip blocks that cannot reach threshold / alpha
        nb = (width + BLOCK - 1) // BLOCK
        n_run = _whole_chunk(width, run0, run1)
        if thr > NO_THRESHOLD and n_dn > 0:
            lim = np.float32(thr * inv_alpha) - sp_max
            u = ub[:nb]
            u[:] = 0.0
            b0 = c0 // BLOCK
            for h in range(n_dn):
                bm = bmax[dn_slot[h], b0:b0 + nb]
                w = dn_w[h]
                for b in range(nb):
                    u[b] += w * np.float32(bm[b])
            n_run = _block_runs(u, lim, width, run0, run1)
            if n_run == 0:
                a[:] = 0.0
                continue
        # 3) dense columns, over runs of unskipped blocks
        # two columns per pass: half the accumulator loads/stores (measured ~15% faster than one)
        h = 0
        while h < n_dn:
            two = h + 1 < n_dn
            col = dense[dn_slot[h], c0:c1]
            col2 = dense[dn_slot[h + 1] if two else dn_slot[h], c0:c1]
            w = dn_w[h]
            w2 = dn_w[h + 1] if two else np.float32(0.0)
            for r in range(n_run):
                j0, j1 = run0[r], run1[r]
                aa = a[j0:j1]
                cc = col[j0:j1]
                cc2 = col2[j0:j1]
                for j in range(j1 - j0):
                    aa[j] += w * np.float32(cc[j]) + w2 * np.float32(cc2[j])
            h += 2
        _zero_skipped(a, run0, run1, n_run)
        # 4) select: only 64-doc pieces whose max reaches the threshold are scanned doc by doc. The max
        # is taken over the int32 bits of the scores (non-negative floats order like their bits), which
        # numba vectorises; a float max or count does not vectorise as well (measured 0.06 vs 0.14 ns
        # per doc). Two levels (512, then 64) keep the scalar scan small when the threshold is low
        # (large rerank caps: the 512-level scan alone cost ~0.5 ms per query at 1M docs, cap 100).
        bits = a.view(np.int32)
        thr_bits = _float_bits(thr, bits_scratch)
        for s0 in range(0, width, SUB):
            if _max_bits(bits[s0:min(width, s0 + SUB)]) < thr_bits:
                continue
            for p0 in range(s0, min(width, s0 + SUB), PIECE):
                p1 = min(width, p0 + PIECE)
                if _max_bits(bits[p0:p1]) < thr_bits:
                    continue
                for j in range(p0, p1):
                    s = a[j]
                    if s < thr or s == 0.0:
                        continue
                    d = c0 + j
                    if has_mask and mask[d] == 0:
                        continue
                    c_doc, c_s, nc, cand_cap, hsize = _add_candidate(
                        c_doc, c_s, nc, cand_cap, thr, heap, hsize, cap, d, s)
                    if hsize == cap:
                        thr = np.float32(heap[0] - window * err)
                        thr_bits = _float_bits(thr, bits_scratch)
        a[:] = 0.0
    # 5) exact rescoring of the surviving candidates with the full query
    return _rescore(c_doc, c_s, nc, thr, f_idx, f_val, fwd_indptr, fwd_indices, fwd_values, qdense, k,
                    out_docs, out_scores)


@njit(cache=True, nogil=True)
def _rescore(c_doc, c_s, nc, thr, f_idx, f_val, fwd_indptr, fwd_indices, fwd_values, qdense, k,
             out_docs, out_scores):
    """Exact scores (forward store, full query) of the candidates whose first-pass score is >= thr;
    writes the best k to out_docs/out_scores (ties: smaller doc id) and returns how many."""
    for j in range(len(f_idx)):
        qdense[f_idx[j]] = f_val[j]
    m = 0
    ex = np.empty(nc, np.float32)
    keep = np.empty(nc, np.int64)
    for c in range(nc):
        if c_s[c] < thr:
            continue
        d = c_doc[c]
        s = np.float32(0.0)
        for p in range(fwd_indptr[d], fwd_indptr[d + 1]):
            s += qdense[fwd_indices[p]] * fwd_values[p]
        if s > 0.0:
            ex[m] = s
            keep[m] = d
            m += 1
    for j in range(len(f_idx)):
        qdense[f_idx[j]] = 0.0
    # sort by doc id, then stably by -score: ties go to the smaller doc id (candidates from the
    # posting-list path are not in doc order)
    by_doc = np.argsort(keep[:m])
    keep_s = keep[:m][by_doc]
    ex_s = ex[:m][by_doc]
    order = np.argsort(-ex_s, kind="mergesort")
    r = min(k, m)
    for i in range(r):
        out_docs[i] = keep_s[order[i]]
        out_scores[i] = ex_s[order[i]]
    return r


# ----------------------------------------------------------------------------- approx: 16-bit scores
# Approximate mode needs only the `rerank` best first-pass scores, not scores within a proven error, so
# it scores in uint16 instead of float32: each query term's code step (q * scale[t]) becomes an integer
# weight on a per-query unit chosen so that the largest possible score fits in 16 bits. Twice the docs
# per SIMD register and half the accumulator bytes; dense columns are added four per pass (one
# accumulator load/store per four codes). On bench-1M (benchmarks/engine_quick.py) the approximate
# default went from 1.13x to 1.72x the exact mode at recall 0.997; the float kernel stays for exact mode, whose proof
# needs a tight error bound. Rounding the weights adds at most unit/2 * 255 per term to a doc's score,
# which grows with the term count, so long queries (more than U16_MAX_TERMS terms after the cut) and
# queries without dense columns (nothing to vectorise) keep the float kernel.
U16_MAX_TERMS = 48
U16_MAX = 65535
QUAD = 4  # dense columns per pass in the 16-bit kernel
CHUNK16 = 16384  # docs per uint16 accumulator chunk (8K-64K measured: 16K fastest, interleaved in one process)


@njit(cache=True, nogil=True)
def use_u16(q_idx, q_val, df, dense_slot):
    """Whether an approximate query goes to search_one_u16 (see the comment above it)."""
    nt = 0
    n_dn = 0
    for j in range(len(q_idx)):
        t = q_idx[j]
        if q_val[j] > 0.0 and df[t] > 0:
            nt += 1
            if dense_slot[t] >= 0:
                n_dn += 1
    return n_dn > 0 and nt <= U16_MAX_TERMS


@njit(cache=True, nogil=True, inline="always")
def _max_u16(x):
    """max of a uint16 slice starting at 0 (vectorised)."""
    m = np.uint16(0)
    for j in range(len(x)):
        m = max(m, x[j])
    return m


@njit(cache=True, nogil=True)
def search_one_u16(q_idx, q_val, f_idx, f_val, k, cap, alpha, mask, has_mask, df, scale, dense_slot,
                   dense, bmax, main_ptr, main_docs, main_codes, fwd_indptr, fwd_indices, fwd_values,
                   qdense, acc, out_docs, out_scores):
    """Approximate top-k of one query (search_one's approx mode, scored in uint16); acc is uint16.

    The cap best 16-bit scores (ties kept) are rescored exactly with the full query f_idx/f_val.
    """
    n = len(fwd_indptr) - 1
    nq = len(q_idx)
    total = 0.0
    nt = 0
    for j in range(nq):
        t = q_idx[j]
        if q_val[j] > 0.0 and df[t] > 0:
            total += 255.0 * q_val[j] * scale[t]
            nt += 1
    if nt == 0:
        return 0
    # weights round to at most q/unit + 1/2, so the largest score is <= total/unit + 127.5 nt = U16_MAX
    unit = total / (U16_MAX - 127.5 * nt)
    sp_w = np.empty(nq, np.uint16)
    sp_pos = np.empty(nq, np.int64)
    sp_end = np.empty(nq, np.int64)
    dn_slot = np.empty(nq + QUAD, np.int64)
    dn_w = np.zeros(nq + QUAD, np.uint16)
    n_sp = 0
    n_dn = 0
    for j in range(nq):
        t = q_idx[j]
        if q_val[j] <= 0.0 or df[t] == 0:
            continue
        w = np.int64(q_val[j] * scale[t] / unit + 0.5)
        if w == 0:  # below half a unit: contributes nothing at this precision
            continue
        if dense_slot[t] >= 0:
            dn_slot[n_dn] = dense_slot[t]
            dn_w[n_dn] = w
            n_dn += 1
        elif main_ptr[t + 1] > main_ptr[t]:
            sp_w[n_sp] = w
            sp_pos[n_sp] = main_ptr[t]
            sp_end[n_sp] = main_ptr[t + 1]
            n_sp += 1
    if n_dn + n_sp == 0:
        return 0
    # pad the dense terms to whole quads with weight-0 reads of a column already being read
    n_pad = n_dn
    while n_pad % QUAD != 0:
        dn_slot[n_pad] = dn_slot[0]
        dn_w[n_pad] = 0
        n_pad += 1
    heap = np.empty(cap, np.float32)
    hsize = 0
    thr = np.float32(NO_THRESHOLD)
    cand_cap = max(1024, 4 * cap)
    c_doc = np.empty(cand_cap, np.int64)
    c_s = np.empty(cand_cap, np.float32)
    nc = 0
    inv_alpha = 1.0 / alpha
    chunk = len(acc)  # CHUNK16 (a multiple of BLOCK: bmax is indexed by c0 // BLOCK)
    nblk_chunk = (chunk + BLOCK - 1) // BLOCK
    run0 = np.empty(nblk_chunk, np.int64)  # doc ranges of the chunk's scored (unskipped) blocks
    run1 = np.empty(nblk_chunk, np.int64)
    ub = np.zeros(nblk_chunk, np.int64)
    for c0 in range(0, n, chunk):
        c1 = min(n, c0 + chunk)
        width = c1 - c0
        a = acc[:width]
        # 1) scatter the sparse lists of this chunk
        sp_max = 0
        for i in range(n_sp):
            p = sp_pos[i]
            e = sp_end[i]
            w = sp_w[i]
            while p < e and main_docs[p] < c1:
                x = np.uintp(main_docs[p] - c0)
                v = np.uint16(a[x] + w * np.uint16(main_codes[p]))
                a[x] = v
                sp_max = max(sp_max, np.int64(v))
                p += 1
            sp_pos[i] = p
        # 2) block bounds, as in search_one, in integer units
        nb = (width + BLOCK - 1) // BLOCK
        n_run = _whole_chunk(width, run0, run1)
        if thr > NO_THRESHOLD:
            lim = thr * inv_alpha - sp_max
            u = ub[:nb]
            u[:] = 0
            b0 = c0 // BLOCK
            for h in range(n_dn):
                bm = bmax[dn_slot[h], b0:b0 + nb]
                w = np.int64(dn_w[h])
                for b in range(nb):
                    u[b] += w * np.int64(bm[b])
            n_run = _block_runs(u, lim, width, run0, run1)
            if n_run == 0:
                a[:] = 0
                continue
        # 3) dense columns, four per pass, over runs of unskipped blocks
        for h in range(0, n_pad, QUAD):
            ca = dense[dn_slot[h], c0:c1]
            cb = dense[dn_slot[h + 1], c0:c1]
            cc = dense[dn_slot[h + 2], c0:c1]
            cd = dense[dn_slot[h + 3], c0:c1]
            wa, wb, wc, wd = dn_w[h], dn_w[h + 1], dn_w[h + 2], dn_w[h + 3]
            for r in range(n_run):
                j0, j1 = run0[r], run1[r]
                aa = a[j0:j1]
                xa, xb, xc, xd = ca[j0:j1], cb[j0:j1], cc[j0:j1], cd[j0:j1]
                for j in range(j1 - j0):
                    aa[j] = np.uint16(aa[j] + np.uint16(xa[j]) * wa + np.uint16(xb[j]) * wb
                                      + np.uint16(xc[j]) * wc + np.uint16(xd[j]) * wd)
        _zero_skipped(a, run0, run1, n_run)
        # 4) select, as in search_one: scan only the pieces whose max reaches the threshold
        for s0 in range(0, width, SUB):
            s1 = min(width, s0 + SUB)
            if np.float32(_max_u16(a[s0:s1])) < thr:
                continue
            for p0 in range(s0, s1, PIECE):
                p1 = min(width, p0 + PIECE)
                if np.float32(_max_u16(a[p0:p1])) < thr:
                    continue
                for j in range(p0, p1):
                    s = np.float32(a[j])
                    if s < thr or s == 0.0:
                        continue
                    d = c0 + j
                    if has_mask and mask[d] == 0:
                        continue
                    c_doc, c_s, nc, cand_cap, hsize = _add_candidate(
                        c_doc, c_s, nc, cand_cap, thr, heap, hsize, cap, d, s)
                    if hsize == cap:
                        thr = heap[0]
        a[:] = 0
    return _rescore(c_doc, c_s, nc, thr, f_idx, f_val, fwd_indptr, fwd_indices, fwd_values, qdense, k,
                    out_docs, out_scores)


@njit(cache=True, nogil=True, inline="always")
def _float_bits(x, scratch):
    """int32 bits of float32 x (scratch: a float32[1]); for x >= 0 they order like x, and any x < 0
    maps below every x >= 0."""
    if x < 0.0:
        return np.int32(-1)
    scratch[0] = x
    return scratch.view(np.int32)[0]


@njit(cache=True, nogil=True, inline="always")
def _max_bits(bits):
    """max of an int32 slice (>= 0); a slice from 0 so that numba vectorises the loop."""
    m = np.int32(0)
    for j in range(len(bits)):
        m = max(m, bits[j])
    return m


@njit(cache=True, nogil=True, inline="always")
def _whole_chunk(width, run0, run1):
    """One run covering the whole chunk (no block bounds computed); returns the run count, 1."""
    run0[0] = 0
    run1[0] = width
    return 1


@njit(cache=True, nogil=True, inline="always")
def _block_runs(u, lim, width, run0, run1):
    """Doc ranges [run0[r], run1[r]) of the maximal runs of BLOCK-doc blocks whose bound u[b] reaches
    lim (blocks below it are skipped); returns how many runs (0: the whole chunk is skipped)."""
    nb = len(u)
    m = 0
    b = 0
    while b < nb:
        if u[b] < lim:
            b += 1
            continue
        e = b
        while e < nb and not u[e] < lim:
            e += 1
        run0[m] = b * BLOCK
        run1[m] = min(width, e * BLOCK)
        m += 1
        b = e
    return m


@njit(cache=True, nogil=True, inline="always")
def _zero_skipped(a, run0, run1, n_run):
    """Reset the accumulator outside the scored runs (the skipped blocks got sparse-list scores only)."""
    prev = 0
    for r in range(n_run):
        a[prev:run0[r]] = 0
        prev = run1[r]
    a[prev:len(a)] = 0


@njit(cache=True, nogil=True, inline="always")
def _add_candidate(c_doc, c_s, nc, cand_cap, thr, heap, hsize, cap, d, s):
    """Append doc d with first-pass score s to the candidates and push s on the cap-best heap; returns
    (c_doc, c_s, nc, cand_cap, hsize). The buffer is compacted (or grown) when full."""
    if nc == cand_cap:
        nc, c_doc, c_s, cand_cap = _compact(c_doc, c_s, nc, thr)
    c_doc[nc] = d
    c_s[nc] = s
    return c_doc, c_s, nc + 1, cand_cap, _heap_push(heap, hsize, cap, s)


@njit(cache=True, nogil=True)
def _compact(c_doc, c_s, nc, thr):
    """Drop candidates below the threshold; grow the buffer when that frees too little."""
    m = 0
    for c in range(nc):
        if c_s[c] >= thr:
            c_doc[m] = c_doc[c]
            c_s[m] = c_s[c]
            m += 1
    cap = len(c_doc)
    if m * 2 > cap:
        cap *= 2
        nd = np.empty(cap, np.int64)
        ns = np.empty(cap, np.float32)
        nd[:m] = c_doc[:m]
        ns[:m] = c_s[:m]
        return m, nd, ns, cap
    return m, c_doc, c_s, cap


@njit(cache=True, nogil=True)
def search_batch(q_indptr, q_indices, q_values, query_mass, rows, k, cap, alpha, use_res, window, mask,
                 has_mask, df, scale, dense_slot, dense, bmax, main_ptr, main_docs, main_codes, res_ptr,
                 res_docs, res_codes, fwd_indptr, fwd_indices, fwd_values, dim, out_docs, out_scores,
                 out_count):
    """search_one over the query rows `rows`; results land in row r of the out_* arrays.

    query_mass < 1 cuts each query (cut_row) for candidate generation; rescoring uses the full row.
    Approximate queries (window 0, main lists only) go to search_one_u16 where use_u16 says so.
    The cut is done here, not in Python: building a cut SparseBatch cost ~50 us per query.
    """
    qdense = np.zeros(dim, np.float32)
    acc = np.zeros(CHUNK, np.float32)
    acc16 = np.zeros(CHUNK16, np.uint16)
    for r in rows:
        a, b = q_indptr[r], q_indptr[r + 1]
        f_idx, f_val = q_indices[a:b], q_values[a:b]
        q_idx, q_val = f_idx, f_val
        if query_mass < 1.0:
            q_idx, q_val = cut_row(f_idx, f_val, query_mass)
        if window == 0.0 and not use_res and use_u16(q_idx, q_val, df, dense_slot):
            out_count[r] = search_one_u16(
                q_idx, q_val, f_idx, f_val, k, cap, alpha, mask, has_mask, df, scale, dense_slot, dense,
                bmax, main_ptr, main_docs, main_codes, fwd_indptr, fwd_indices, fwd_values, qdense, acc16,
                out_docs[r], out_scores[r])
            continue
        out_count[r] = search_one(
            q_idx, q_val, f_idx, f_val, k, cap, alpha, use_res, window, mask, has_mask, df, scale,
            dense_slot, dense, bmax, main_ptr, main_docs, main_codes, res_ptr, res_docs, res_codes,
            fwd_indptr, fwd_indices, fwd_values, qdense, acc, out_docs[r], out_scores[r])


@njit(cache=True, nogil=True)
def cut_row(indices, values, mass):
    """Query term cut: the heaviest terms covering `mass` of the row's L1 weight (ties: earlier term),
    returned in their original (dim) order."""
    n = len(indices)
    total = 0.0
    for p in range(n):
        total += values[p]
    order = np.argsort(-values, kind="mergesort")
    keep = np.zeros(n, np.bool_)
    got = 0.0
    m = 0
    for r in range(n):
        keep[order[r]] = True
        m += 1
        got += values[order[r]]
        if got >= mass * total:
            break
    out_i = np.empty(m, indices.dtype)
    out_v = np.empty(m, values.dtype)
    j = 0
    for p in range(n):
        if keep[p]:
            out_i[j] = indices[p]
            out_v[j] = values[p]
            j += 1
    return out_i, out_v
