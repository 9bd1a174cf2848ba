#!/usr/bin/env python3
"""CPU emulation (plain Python) of the tensor-core GEMV of kernels/decode.cu (`linear_mma`, which the et_gemv_* entry points also run).

Each lane's registers are built exactly as the kernel builds them (which row and which k
every 16-byte load reads, which loads are predicated off), the mma.m16n8k16 fragments are
assembled into matrices with the layouts of the PTX ISA (section "Matrix Fragments for
mma.m16n8k16 with floating point type"), and the partial tiles are reduced as the kernel
does. Inputs are small integers, so every sum is exact and any mistake in the index math
shows as a mismatch against the direct product. Run: python3 kernels/emulate_gemv.py
"""
import random
import sys


def mma(a_regs, b_regs, c_regs):
    """One warp-wide mma.m16n8k16: a_regs[lane] = 4 pairs, b_regs[lane] = 2 pairs,
    c_regs[lane] = 4 floats; returns the new c_regs."""
    A = [[None] * 16 for _ in range(16)]
    B = [[None] * 8 for _ in range(16)]
    C = [[None] * 8 for _ in range(16)]
    for lane in range(32):
        g, c = lane >> 2, lane & 3
        a = a_regs[lane]
        # a0,a1: (g, 2c..), a2,a3: (g+8, 2c..), a4,a5: (g, 2c+8..), a6,a7: (g+8, 2c+8..)
        for i, (row, col) in enumerate([(g, 2 * c), (g + 8, 2 * c), (g, 2 * c + 8), (g + 8, 2 * c + 8)]):
            A[row][col], A[row][col + 1] = a[i]
        b = b_regs[lane]
        # b0,b1: (k = 2c.., n = g), b2,b3: (k = 2c+8.., n = g)
        for i, k in enumerate([2 * c, 2 * c + 8]):
            B[k][g], B[k + 1][g] = b[i]
        d = c_regs[lane]
        # c0,c1: (g, 2c..), c2,c3: (g+8, 2c..)
        C[g][2 * c], C[g][2 * c + 1], C[g + 8][2 * c], C[g + 8][2 * c + 1] = d
    for row in A + B + C:
        assert None not in row
    D = [[C[m][n] + sum(A[m][k] * B[k][n] for k in range(16)) for n in range(8)] for m in range(16)]
    out = []
    for lane in range(32):
        g, c = lane >> 2, lane & 3
        out.append([D[g][2 * c], D[g][2 * c + 1], D[g + 8][2 * c], D[g + 8][2 * c + 1]])
    return out


def gemv_mma(x, sx, w, sw, bias, M, N, K, NW, RT, U0, X16):
    """y[M][N] as the kernel computes it (x, w flat lists with row strides sx, sw)."""
    MROWS = 16 if X16 else 8
    U = U0 // 2 if X16 and U0 > 2 else U0
    NACC = 2 if RT == 1 else 1
    y = {}
    reads = set()

    def load(buf, stride, row, k):
        # 8 consecutive elements (16 bytes) of row `row` from k; k % 8 == 0 by construction.
        assert k % 8 == 0 and 0 <= k and k + 8 <= K, (row, k)
        reads.add((id(buf), row, k))
        base = row * stride + k
        return [buf[base + e] for e in range(8)]

    grid_x = (N + 8 * RT - 1) // (8 * RT)
    grid_y = (M + MROWS - 1) // MROWS
    for by in range(grid_y):
        for bx in range(grid_x):
            n0, m0 = bx * 8 * RT, by * MROWS
            mcount = min(MROWS, M - m0)
            chunks = (K + 31) >> 5
            per = (chunks + NW - 1) // NW
            red = {}
            for warp in range(NW):
                jb = min(chunks, warp * per)
                je = min(chunks, jb + per)
                acc = [[[[0.0] * 4 for _ in range(32)] for _ in range(RT)] for _ in range(NACC)]
                for j in range(jb, je, U):
                    a_lane, b_lane, w_lane = [], [], []
                    for lane in range(32):
                        g, c = lane >> 2, lane & 3
                        jlim = min(je, (K - c * 8 + 31) >> 5)
                        nvalid = jlim - j
                        wv = [[None] * RT for _ in range(U)]
                        av, bv = [None] * U, [None] * U
                        for u in range(U):
                            k = (j + u) * 32 + 8 * c
                            for t in range(RT):
                                n = n0 + 8 * t + g
                                ok = u < nvalid and n < N
                                wv[u][t] = load(w, sw, n, k) if ok else [0] * 8
                            aok = g < mcount
                            bok = X16 and g + 8 < mcount
                            av[u] = load(x, sx, m0 + g, k) if (u < nvalid and aok) else [0] * 8
                            bv[u] = load(x, sx, m0 + g + 8, k) if (u < nvalid and bok) else [0] * 8
                        a_lane.append(av)
                        b_lane.append(bv)
                        w_lane.append(wv)
                    pair = lambda v, i: (v[2 * i], v[2 * i + 1])  # register i of a uint4 (.x .y .z .w)
                    for u in range(U):
                        for t in range(RT):
                            e = u % NACC
                            # Mma(acc, av.x, bv.x, av.y, bv.y, wv.x, wv.y), then .z/.w
                            for h in range(2):
                                A = [[pair(a_lane[l][u], 2 * h), pair(b_lane[l][u], 2 * h),
                                      pair(a_lane[l][u], 2 * h + 1), pair(b_lane[l][u], 2 * h + 1)]
                                     for l in range(32)]
                                B = [[pair(w_lane[l][u][t], 2 * h), pair(w_lane[l][u][t], 2 * h + 1)]
                                     for l in range(32)]
                                acc[e][t] = mma(A, B, acc[e][t])
                for lane in range(32):
                    g, c = lane >> 2, lane & 3
                    for t in range(RT):
                        d = [sum(acc[e][t][lane][i] for e in range(NACC)) for i in range(4)]
                        red[(warp, t, g, 2 * c)] = d[0]
                        red[(warp, t, g, 2 * c + 1)] = d[1]
                        if X16:
                            red[(warp, t, g + 8, 2 * c)] = d[2]
                            red[(warp, t, g + 8, 2 * c + 1)] = d[3]
            for i in range(RT * MROWS * 8):
                t, m, r = i // (MROWS * 8), (i >> 3) % MROWS, i & 7
                n = n0 + 8 * t + r
                if m < mcount and n < N:
                    s = sum(red[(q, t, m, r)] for q in range(NW))
                    if bias is not None:
                        s += bias[n]
                    key = (m0 + m, n)
                    assert key not in y, key
                    y[key] = s
    return y, reads


def check(M, N, K, NW, RT, U0, X16, pad=0, with_bias=False, seed=0):
    rnd = random.Random(seed)
    sx, sw = K + pad, K + pad
    x = [rnd.randint(-3, 3) for _ in range(max(M, 1) * sx)]
    w = [rnd.randint(-3, 3) for _ in range(max(N, 1) * sw)]
    bias = [rnd.randint(-5, 5) for _ in range(N)] if with_bias else None
    y, reads = gemv_mma(x, sx, w, sw, bias, M, N, K, NW, RT, U0, X16)
    assert len(y) == M * N, (len(y), M * N)
    for m in range(M):
        for n in range(N):
            want = sum(x[m * sx + k] * w[n * sw + k] for k in range(K)) + (bias[n] if bias else 0)
            assert y[(m, n)] == want, (M, N, K, NW, RT, U0, X16, m, n, y[(m, n)], want)
    # Every 16-byte piece of every used row of W is read exactly once per block row.
    wreads = {(r, k) for (b, r, k) in reads if b == id(w)}
    assert wreads == {(n, k) for n in range(N) for k in range(0, K, 8)}


def main():
    variants = [(8, 1, 8), (8, 2, 4), (8, 4, 4)]  # (NW, RT, U) of v0, v1, v2
    cases = [
        # M, N, K, pad (row stride - K)
        (1, 8, 8, 0), (1, 16, 32, 0), (3, 20, 264, 8), (4, 40, 520, 0), (8, 9, 64, 0),
        (1, 33, 1000, 0), (2, 64, 2048, 0), (5, 7, 40, 16), (4, 24, 256 * 8 + 8, 0),
        (9, 12, 96, 0), (16, 17, 136, 8), (20, 10, 48, 0), (1, 5, 0, 0),
    ]
    count = 0
    for (nw, rt, u) in variants:
        for (M, N, K, pad) in cases:
            x16 = M > 8
            check(M, N, K, nw, rt, u, x16, pad, with_bias=(count % 2 == 0), seed=count)
            count += 1
    print(f"emulate_gemv: {count} cases, all exact")


if __name__ == "__main__":
    sys.exit(main())
