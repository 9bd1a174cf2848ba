#!/usr/bin/env python3
"""CPU emulation of the int4 tile-packed layout and of kernels/int4mm.cu's
index math, in plain Python (no numpy, no torch, no GPU).

It packs random 4-bit weights the way kernels/README.md says
aten._convert_weight_to_int4pack does on CUDA, then replays what each lane
of our kernels reads and computes: the word offsets of load_step_b, the
nibble-to-fragment mapping of centred_pair/dequant_word, the swizzled
shared-memory staging of the activations and the ldmatrix addresses, the
mma.m16n8k16 fragment semantics (PTX ISA), the skinny kernel's split of K
between warps and the tiled kernel's row tiles, and the output stores. The
result must equal a plain dequantise-then-matmul. It checks our reading of
the layout against our kernel, not against PyTorch: the GPU harness
(kernels/check_int4.py) compares with torch itself.

Usage: python3 kernels/emulate_int4.py   (exit status 0 when every case passes)
"""

import random
import struct
import sys

STEP_K = 128
ROW_BYTES = STEP_K * 2
VEC_PER_ROW = ROW_BYTES // 16


def bf16_round(v):
    """Round a Python float to the nearest bf16 (ties to even)."""
    b = struct.unpack("<I", struct.pack("<f", v))[0]  # to fp32 first (exact for our values)
    lsb = (b >> 16) & 1
    b = (b + 0x7FFF + lsb) & 0xFFFF0000
    return struct.unpack("<f", struct.pack("<I", b))[0]


def bf16_bits(v):
    return struct.unpack("<I", struct.pack("<f", v))[0] >> 16


def bits_bf16(h):
    return struct.unpack("<f", struct.pack("<I", (h & 0xFFFF) << 16))[0]


# ----------------------------------------------------------------- packing


def pack_uint8(q):
    """[N][K] nibbles -> [N][K/2] bytes: the even k in the high nibble."""
    return [[(row[2 * b] << 4) | row[2 * b + 1] for b in range(len(row) // 2)] for row in q]


def convert_to_int4pack(q, ikt):
    """The CUDA tile packing, as a flat list of int32 words in the order of
    the [N/8][K/(ikt*16)][32][ikt/2] tensor."""
    n_rows, k = len(q), len(q[0])
    by = pack_uint8(q)
    ksuper = k // (ikt * 16)
    words = []
    for nt in range(n_rows // 8):
        for ks in range(ksuper):
            for lane in range(32):
                n = nt * 8 + lane // 4
                c = lane % 4
                for j in range(ikt // 2):
                    b0 = (ks * ikt + 2 * j) * 8 + c  # byte index along K/2
                    v = [by[n][b0], by[n][b0 + 4], by[n][b0 + 8], by[n][b0 + 12]]
                    word = 0
                    for i in range(4):
                        word |= (v[i] >> 4) << (4 * i)  # high nibbles (even k) in bits 0..15
                        word |= (v[i] & 0xF) << (16 + 4 * i)  # low nibbles (odd k) in bits 16..31
                    words.append(word)
    return words


# ------------------------------------------------------ kernel primitives


def centred_pair(word, i):
    lo = (word >> (4 * i)) & 0xF
    hi = (word >> (16 + 4 * i)) & 0xF
    # bits (0x4300 | q) are bf16 128 + q; fma(x, 1, -136) is exact
    return (bits_bf16(0x4300 | lo) - 136.0, bits_bf16(0x4300 | hi) - 136.0)


def dequant_word(word, sz):
    s, z = sz
    return [tuple(bf16_round(v * s + z) for v in centred_pair(word, i)) for i in range(4)]


def mma(acc, a, b0, b1):
    """acc[lane] (4 floats) += A (16x16) * B (16x8), from per-lane fragments."""
    A = [[0.0] * 16 for _ in range(16)]
    B = [[0.0] * 8 for _ in range(16)]
    for lane in range(32):
        g, c = lane // 4, lane % 4
        r = a[lane]
        A[g][2 * c], A[g][2 * c + 1] = r[0]
        A[g + 8][2 * c], A[g + 8][2 * c + 1] = r[1]
        A[g][2 * c + 8], A[g][2 * c + 9] = r[2]
        A[g + 8][2 * c + 8], A[g + 8][2 * c + 9] = r[3]
        B[2 * c][g], B[2 * c + 1][g] = b0[lane]
        B[2 * c + 8][g], B[2 * c + 9][g] = b1[lane]
    for lane in range(32):
        g, c = lane // 4, lane % 4
        for idx, (row, col) in enumerate(
            [(g, 2 * c), (g, 2 * c + 1), (g + 8, 2 * c), (g + 8, 2 * c + 1)]
        ):
            acc[lane][idx] += sum(A[row][kk] * B[kk][col] for kk in range(16))


def ldmatrix_x4(smem, addr):
    """addr[lane]: byte address of row lane%8 of matrix lane//8.
    Returns per-lane 4 registers, each a pair of values."""
    out = [[None] * 4 for _ in range(32)]
    for mat in range(4):
        rows = [addr[mat * 8 + i] for i in range(8)]
        for lane in range(32):
            base = rows[lane // 4]
            e = 2 * (lane % 4)
            out[lane][mat] = (smem[(base + 2 * e) // 2], smem[(base + 2 * e + 2) // 2])
    return out


def stage(smem, byte_base, x, rows, row0, m, k, kbase):
    """cp.async staging of rows row0.. of step kbase into smem (a list of
    bf16 values indexed by byte address / 2), swizzled, zeros outside x."""
    for r in range(rows):
        for v in range(VEC_PER_ROW):
            row, kk = row0 + r, kbase + v * 8
            ok = row < m and kk < k
            dst = byte_base + r * ROW_BYTES + ((v ^ (r & 7)) << 4)
            for e in range(8):
                smem[dst // 2 + e] = x[row][kk + e] if ok else 0.0


def load_step_b(words, qsz, n, ksuper, ntiles, ikt, gshift, nt, step, lane):
    """(word, (scale, zero)) for the 4 words of one lane, n-tile and step."""
    u_count, wps = 8 // ikt, ikt // 2
    out = []
    for u in range(u_count):
        st = step * u_count + u
        ok = nt < ntiles and st < ksuper
        for j in range(wps):
            word_i = u * wps + j
            if ok:
                w = words[((nt * ksuper + st) * 32 + lane) * wps + j]
                group = (step * STEP_K + 32 * word_i) >> gshift
                sz = qsz[group][nt * 8 + lane // 4]
            else:
                w, sz = 0, (0.0, 0.0)
            out.append((w, sz))
    return out


# ---------------------------------------------------------------- kernels


def run_skinny(x, words, qsz, m, n, k, group, ikt, nt_per_block, rows, nwarps):
    """Grid x: chunks of `rows` rows (each its own x/y offset and row count)."""
    y = [[None] * n for _ in range(m)]
    for row0 in range(0, m, rows):
        part = run_skinny_chunk(x[row0:row0 + rows], words, qsz, min(rows, m - row0), n, k,
                                group, ikt, nt_per_block, rows, nwarps)
        y[row0:row0 + rows] = part
    return y


def run_skinny_chunk(x, words, qsz, m, n, k, group, ikt, nt_per_block, rows, nwarps):
    assert m <= rows
    gshift = group.bit_length() - 1
    ntiles, ksuper, steps = n // 8, k // (16 * ikt), -(-k // STEP_K)
    y = [[None] * n for _ in range(m)]
    for block in range(-(-ntiles // nt_per_block)):
        nt0 = block * nt_per_block
        partial = []
        for warp in range(nwarps):
            acc = [[[0.0] * 4 for _ in range(32)] for _ in range(nt_per_block)]
            for step in range(warp, steps, nwarps):
                smem = [None] * (rows * ROW_BYTES // 2)
                stage(smem, 0, x, rows, 0, m, k, step * STEP_K)
                bw = [
                    [load_step_b(words, qsz, n, ksuper, ntiles, ikt, gshift, nt0 + t, step, l)
                     for l in range(32)]
                    for t in range(nt_per_block)
                ]
                for j in range(4):
                    per_h = []
                    for h in range(2):
                        addr = []
                        for lane in range(32):
                            q, i8 = lane >> 3, lane & 7
                            r = (0 if rows == 8 else (q & 1) * 8) + i8
                            v = 2 * (2 * j + h) + (q >> 1)
                            addr.append(r * ROW_BYTES + ((v ^ (r & 7)) << 4))
                        per_h.append([tuple(rr) for rr in ldmatrix_x4(smem, addr)])
                    a0, a1 = per_h
                    for t in range(nt_per_block):
                        f = [dequant_word(*bw[t][l][j]) for l in range(32)]
                        mma(acc[t], a0, [fl[0] for fl in f], [fl[1] for fl in f])
                        mma(acc[t], a1, [fl[2] for fl in f], [fl[3] for fl in f])
            partial.append(acc)
        for t in range(nt_per_block):
            nt = nt0 + t
            if nt >= ntiles:
                continue
            for l in range(32):
                v = [sum(partial[w][t][l][r] for w in range(nwarps)) for r in range(4)]
                g, c2 = l >> 2, 2 * (l & 3)
                col = nt * 8 + c2
                if g < m:
                    y[g][col], y[g][col + 1] = v[0], v[1]
                if rows == 16 and g + 8 < m:
                    y[g + 8][col], y[g + 8][col + 1] = v[2], v[3]
    return y


def run_tiled(x, words, qsz, m, n, k, group, ikt, mt_count, nt_per_warp):
    gshift = group.bit_length() - 1
    ntiles, ksuper, steps = n // 8, k // (16 * ikt), -(-k // STEP_K)
    bm = 16 * mt_count
    y = [[None] * n for _ in range(m)]
    for by in range(-(-m // bm)):
        m0 = by * bm
        for bx in range(-(-ntiles // (4 * nt_per_warp))):
            for warp in range(4):
                nt0 = (bx * 4 + warp) * nt_per_warp
                acc = [[[[0.0] * 4 for _ in range(32)] for _ in range(nt_per_warp)]
                       for _ in range(mt_count)]
                for step in range(steps):
                    smem = [None] * (bm * ROW_BYTES // 2)
                    stage(smem, 0, x, bm, m0, m, k, step * STEP_K)
                    bw = [
                        [load_step_b(words, qsz, n, ksuper, ntiles, ikt, gshift, nt0 + t, step, l)
                         for l in range(32)]
                        for t in range(nt_per_warp)
                    ]
                    for j in range(4):
                        f = [[dequant_word(*bw[t][l][j]) for l in range(32)]
                             for t in range(nt_per_warp)]
                        for h in range(2):
                            for mt in range(mt_count):
                                addr = []
                                for lane in range(32):
                                    q, i8 = lane >> 3, lane & 7
                                    r = mt * 16 + (q & 1) * 8 + i8
                                    v = 2 * (2 * j + h) + (q >> 1)
                                    addr.append(r * ROW_BYTES + ((v ^ (r & 7)) << 4))
                                a = [tuple(rr) for rr in ldmatrix_x4(smem, addr)]
                                for t in range(nt_per_warp):
                                    mma(acc[mt][t], a, [fl[2 * h] for fl in f[t]],
                                        [fl[2 * h + 1] for fl in f[t]])
                for t in range(nt_per_warp):
                    nt = nt0 + t
                    if nt >= ntiles:
                        continue
                    for mt in range(mt_count):
                        for l in range(32):
                            g, c2 = l >> 2, 2 * (l & 3)
                            row, col = m0 + mt * 16 + g, nt * 8 + c2
                            v = acc[mt][t][l]
                            if row < m:
                                y[row][col], y[row][col + 1] = v[0], v[1]
                            if row + 8 < m:
                                y[row + 8][col], y[row + 8][col + 1] = v[2], v[3]
    return y


# ------------------------------------------------- the kernels' fast paths


def check_fast_paths(m, n, k, group, ikt, rows, bm):
    """The fast paths of int4mm.cu (full steps) compute the same addresses as
    the generic index math above, from per-lane bases plus offsets."""
    gshift = group.bit_length() - 1
    ksuper, wps, u_count = k // (16 * ikt), ikt // 2, 8 // ikt
    full_steps = k // STEP_K
    qrow = [((32 * j) >> gshift) * n * 4 for j in range(4)]
    for nt0 in range(0, n // 8, 3):
        for lane in range(32):
            wl = nt0 * k + lane * wps
            ql = nt0 * 8 + lane // 4
            for step in range(full_steps):
                for t in range(min(4, n // 8 - nt0)):
                    for u in range(u_count):
                        st = step * u_count + u
                        generic = ((nt0 + t) * ksuper + st) * 32 * wps + lane * wps
                        fast = wl + step * STEP_K + t * k + u * 16 * ikt
                        if generic != fast:
                            return f"B word offset: generic {generic} fast {fast}"
                    for j in range(4):
                        generic = ((step * STEP_K + 32 * j) >> gshift) * n + (nt0 + t) * 8 + lane // 4
                        fast = ql + ((step * STEP_K) >> gshift) * n + qrow[j] // 4 + 8 * t
                        if generic != fast:
                            return f"scale offset: generic {generic} fast {fast}"
    # Skinny staging (a block sees at most `rows` rows): lane copies vector
    # lane % 16 of rows lane // 16 + 2i.
    ms = min(m, rows)
    for lane in range(32):
        r0, v16 = lane >> 4, lane & 15
        dst = [(r0 + 2 * i) * ROW_BYTES + ((v16 ^ ((r0 + 2 * i) & 7)) << 4) for i in range(4)]
        nvalid = (ms - r0 + 1) // 2 if ms > r0 else 0
        for i in range(rows // 2):
            v_id = lane + 32 * i
            r, v = v_id // VEC_PER_ROW, v_id % VEC_PER_ROW
            gen_dst = r * ROW_BYTES + ((v ^ (r & 7)) << 4)
            fast_dst = dst[i & 3] + (i >> 2) * 8 * ROW_BYTES
            if gen_dst != fast_dst:
                return f"skinny dst: generic {gen_dst} fast {fast_dst}"
            if (r < ms) != (i < nvalid):
                return f"skinny row validity lane {lane} i {i}"
            for step in range(full_steps):
                gen_src = r * k + step * STEP_K + v * 8
                fast_src = r0 * k + v16 * 8 + step * STEP_K + 2 * i * k
                if gen_src != fast_src:
                    return f"skinny src: generic {gen_src} fast {fast_src}"
    # Tiled staging: thread copies vector tid % 16 of tile rows tid // 16 + 8i.
    for m0 in range(0, m, bm):
        for tid in range(128):
            r0, v16 = tid >> 4, tid & 15
            dst0 = r0 * ROW_BYTES + ((v16 ^ (r0 & 7)) << 4)
            nvalid = (m - m0 - r0 + 7) // 8 if m - m0 > r0 else 0
            for i in range(bm // 8):
                v_id = tid + 128 * i
                r, v = v_id // VEC_PER_ROW, v_id % VEC_PER_ROW
                gen_dst = r * ROW_BYTES + ((v ^ (r & 7)) << 4)
                if gen_dst != dst0 + i * 8 * ROW_BYTES:
                    return f"tiled dst: generic {gen_dst} fast {dst0 + i * 8 * ROW_BYTES}"
                if (m0 + r < m) != (i < nvalid):
                    return f"tiled row validity tid {tid} i {i}"
                for step in range(full_steps):
                    gen_src = (m0 + r) * k + step * STEP_K + v * 8
                    fast_src = (m0 + r0) * k + v16 * 8 + step * STEP_K + 8 * i * k
                    if gen_src != fast_src:
                        return f"tiled src: generic {gen_src} fast {fast_src}"
    return None


# --------------------------------------------------------------- the test


def reference(x, q, qsz, group):
    m, n, k = len(x), len(q), len(q[0])
    w = [[bf16_round((q[c][kk] - 8) * qsz[kk // group][c][0] + qsz[kk // group][c][1])
          for kk in range(k)] for c in range(n)]
    return [[sum(x[r][kk] * w[c][kk] for kk in range(k)) for c in range(n)] for r in range(m)]


def case(rng, m, n, k, group, ikt, kernel, **kw):
    q = [[rng.randrange(16) for _ in range(k)] for _ in range(n)]
    x = [[bf16_round(rng.uniform(-1, 1)) for _ in range(k)] for _ in range(m)]
    qsz = [[(bf16_round(rng.uniform(0.01, 0.1)), bf16_round(rng.uniform(-0.5, 0.5)))
            for _ in range(n)] for _ in range(k // group)]
    words = convert_to_int4pack(q, ikt)
    assert len(words) == (n // 8) * (k // (ikt * 16)) * 32 * (ikt // 2)
    if kernel == "skinny":
        y = run_skinny(x, words, qsz, m, n, k, group, ikt, **kw)
    else:
        y = run_tiled(x, words, qsz, m, n, k, group, ikt, **kw)
    ref = reference(x, q, qsz, group)
    worst = 0.0
    for r in range(m):
        for c in range(n):
            if y[r][c] is None:
                return f"y[{r}][{c}] never written"
            worst = max(worst, abs(y[r][c] - ref[r][c]) / (1e-6 + abs(ref[r][c])))
    return None if worst < 1e-9 else f"max relative error {worst:.3e}"


def main():
    rng = random.Random(15)
    cases = [
        # (m, n, k, group, ikt, kernel, params)
        (1, 8, 32, 32, 2, "skinny", dict(nt_per_block=2, rows=8, nwarps=2)),
        (3, 16, 128, 64, 8, "skinny", dict(nt_per_block=2, rows=8, nwarps=2)),
        (8, 24, 256, 32, 4, "skinny", dict(nt_per_block=4, rows=8, nwarps=4)),
        (11, 16, 160, 32, 2, "skinny", dict(nt_per_block=2, rows=16, nwarps=2)),
        (16, 8, 384, 128, 8, "skinny", dict(nt_per_block=2, rows=16, nwarps=4)),
        (5, 16, 256, 256, 8, "skinny", dict(nt_per_block=2, rows=8, nwarps=1)),
        (37, 24, 256, 64, 8, "skinny", dict(nt_per_block=2, rows=16, nwarps=2)),
        (19, 8, 128, 32, 4, "skinny", dict(nt_per_block=2, rows=8, nwarps=1)),
        (17, 16, 128, 64, 8, "tiled", dict(mt_count=2, nt_per_warp=2)),
        (33, 40, 192, 64, 4, "tiled", dict(mt_count=4, nt_per_warp=1)),
        (20, 8, 96, 32, 2, "tiled", dict(mt_count=2, nt_per_warp=2)),
    ]
    failed = 0
    for m, n, k, group, ikt, kernel, kw in cases:
        err = case(rng, m, n, k, group, ikt, kernel, **kw)
        tag = f"{kernel:6s} m={m} n={n} k={k} group={group} ikt={ikt} {kw}"
        print(("FAIL " + tag + ": " + err) if err else ("ok   " + tag))
        failed += err is not None
    for m, n, k, group, ikt in [(1, 64, 1024, 32, 8), (13, 40, 640, 64, 4), (61, 24, 512, 256, 2),
                                (200, 16, 384, 128, 8), (16, 8, 256, 32, 2)]:
        for rows, bm in [(8, 32), (16, 64)]:
            err = check_fast_paths(m, n, k, group, ikt, rows, bm)
            tag = f"fast paths m={m} n={n} k={k} group={group} ikt={ikt} rows={rows} bm={bm}"
            print(("FAIL " + tag + ": " + err) if err else ("ok   " + tag))
            failed += err is not None
    print(f"{failed} failures")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
