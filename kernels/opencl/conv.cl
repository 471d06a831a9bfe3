/* Stride-1 convolutions in f32 for CPU devices (POCL) without im2col
 * columns (backends/opencl/conv.c plans them). Each image plane is
 * first copied into a frame with its padding as zeros, `wp` wide and
 * `plane` values apart (zeros after it too); an output position then reads
 * tap (ty, tx) at the same offset ty * dh * wp + tx * dw from its own
 * position in the frame. So a run of 16 outputs along the frame's rows,
 * which may wrap from one row to the next, reads 16 consecutive values for
 * every tap: a GEMM whose B rows are shifted windows of the frame. The
 * frame's outputs in its last wp - ow columns of a row are not part of the
 * result and are not stored. Against im2col + GEMM this saves writing and
 * reading the columns (kh * kw times the image), which was as much time as
 * the products on two cores. */

#define UG_FRAME_BITS8 uint8

/* y[p] = x[p] framed: planes of h x w into hp rows of wp, the image at
 * (top, left), zeros around it and up to the next plane (`plane` values
 * apart). One item per frame row; the last also zeroes the frame's tail. */
kernel void frame_planes_f32(global float *y, ulong yoff, const global float *x, ulong xoff, long planes,
                             long h, long w, long hp, long wp, long top, long left, long plane)
{
    const long i = get_global_id(0);
    if (i >= planes * hp)
        return;
    const long p = i / hp, r = i - p * hp, sr = r - top;
    const bool inside = sr >= 0 && sr < h;
    global uint *o = (global uint *)(y + yoff + p * plane + r * wp);
    const global uint *s = (const global uint *)(x + xoff + (p * h + (inside ? sr : 0)) * w);
    /* zeros up to `left`, the row's w values, zeros to the frame's edge */
    const long l = inside ? left : wp, e = inside ? left + w : wp;
    long j = 0;
    for (; j + 8 <= l; j += 8)
        vstore8((UG_FRAME_BITS8)(0), 0, o + j);
    for (; j < l; j++)
        o[j] = 0;
    for (; j + 8 <= e; j += 8)
        vstore8(vload8(0, s + j - left), 0, o + j);
    for (; j < e; j++)
        o[j] = s[j - left];
    for (; j + 8 <= wp; j += 8)
        vstore8((UG_FRAME_BITS8)(0), 0, o + j);
    for (; j < wp; j++)
        o[j] = 0;
    if (r == hp - 1)
        for (long t = (r + 1) * wp; t < plane; t++)
            ((global uint *)(y + yoff + p * plane))[t] = 0;
}

/* The weights as GEMM rows, a[(k * taps + t) * mp + r] for the channel k
 * summed, the tap t and the output row r (mp: m rounded up to 16, zeros
 * past m). The forward pass: r an output channel, k an input one. The
 * input gradient (flip): r an input channel, k an output one, and the
 * taps reversed, which makes it the forward pass of the padded output
 * gradient. */
kernel void conv_pack_f32(global float *a, ulong aoff, const global float *w, ulong woff, long m, long mp,
                          long kc, long taps, int flip)
{
    const long i = get_global_id(0);
    if (i >= kc * taps * mp)
        return;
    const long r = i % mp, kt = i / mp, t = kt % taps, k = kt / taps;
    float v = 0.0f;
    if (r < m)
        v = flip ? w[woff + (k * m + r) * taps + (taps - 1 - t)] : w[woff + (r * kc + k) * taps + t];
    a[aoff + i] = v;
}

/* y[e, r, oy, ox] = sum over k, ty, tx of a[(k, ty, tx), r] * frame[e, k]
 * at the output's position plus the tap's offset (+ bias[r]): each item 16
 * output rows by 16 frame positions, sixteen 16-wide registers, the
 * frame's window loaded once a tap and each weight broadcast (the GEMM
 * microkernel of gemm.cl's gemm_f32_tiled, in its order of sums). */
#define UG_CD_ROW(r) acc##r = fma((float16)(ar[r]), b, acc##r);
#define UG_CD_STORE(r)                                                                      \
    if (r0 + r < m) {                                                                       \
        float v[16];                                                                        \
        vstore16(acc##r, 0, v);                                                             \
        const float add = with_bias ? bias[boff + r0 + r] : 0.0f;                           \
        global float *yr = ye + (r0 + r) * oh * ow;                                         \
        long yy = oy0, xx = ox0;                                                            \
        for (int j = 0; j < 16; j++) {                                                      \
            if (yy < oh && xx < ow)                                                         \
                yr[yy * ow + xx] = with_bias ? v[j] + add : v[j];                           \
            if (++xx == wp) {                                                               \
                xx = 0;                                                                     \
                yy++;                                                                       \
            }                                                                               \
        }                                                                                   \
    }
kernel void conv_direct_f32(global float *y, ulong yoff, const global float *a, ulong aoff,
                            const global float *frame, ulong foff, const global float *bias, ulong boff,
                            int with_bias, long m, long mp, long kc, int kh, int kw, int dh, int dw, long wp,
                            long plane, long oh, long ow)
{
    const long q0 = (long)get_global_id(0) * 16, r0 = (long)get_global_id(1) * 16, e = get_global_id(2);
    float16 acc0 = 0.0f, acc1 = 0.0f, acc2 = 0.0f, acc3 = 0.0f, acc4 = 0.0f, acc5 = 0.0f, acc6 = 0.0f,
            acc7 = 0.0f, acc8 = 0.0f, acc9 = 0.0f, acc10 = 0.0f, acc11 = 0.0f, acc12 = 0.0f, acc13 = 0.0f,
            acc14 = 0.0f, acc15 = 0.0f;
    const global float *fe = frame + foff + e * kc * plane + q0;
    const global float *ar = a + aoff + r0;
    for (long k = 0; k < kc; k++)
        for (int ty = 0; ty < kh; ty++) {
            const global float *fr = fe + k * plane + (long)ty * dh * wp;
            for (int tx = 0; tx < kw; tx++, ar += mp) {
                const float16 b = vload16(0, fr + (long)tx * dw);
                UG_CD_ROW(0) UG_CD_ROW(1) UG_CD_ROW(2) UG_CD_ROW(3) UG_CD_ROW(4) UG_CD_ROW(5)
                UG_CD_ROW(6) UG_CD_ROW(7) UG_CD_ROW(8) UG_CD_ROW(9) UG_CD_ROW(10) UG_CD_ROW(11)
                UG_CD_ROW(12) UG_CD_ROW(13) UG_CD_ROW(14) UG_CD_ROW(15)
            }
        }
    const long oy0 = q0 / wp, ox0 = q0 - oy0 * wp;
    global float *ye = y + yoff + e * m * oh * ow;
    UG_CD_STORE(0) UG_CD_STORE(1) UG_CD_STORE(2) UG_CD_STORE(3) UG_CD_STORE(4) UG_CD_STORE(5)
    UG_CD_STORE(6) UG_CD_STORE(7) UG_CD_STORE(8) UG_CD_STORE(9) UG_CD_STORE(10) UG_CD_STORE(11)
    UG_CD_STORE(12) UG_CD_STORE(13) UG_CD_STORE(14) UG_CD_STORE(15)
}

/* dw[r, (k, ty, tx)] (+ beta dw) = the sum over entries e and frame
 * positions p < len of g[e, r, p] * frame[e, k] at p plus the tap's
 * offset: g is the output gradient framed with zeros in the positions
 * that are not outputs, so those add nothing. Each item 4 x 4 results as
 * sums of 16-wide products along p (gemm_f32_nt's tile); len is a
 * multiple of 16. */
#define UG_WG_ROW(i)                                                                        \
    {                                                                                       \
        const float16 x = vload16(0, g##i + p);                                             \
        s##i##0 = fma(x, f0, s##i##0);                                                      \
        s##i##1 = fma(x, f1, s##i##1);                                                      \
        s##i##2 = fma(x, f2, s##i##2);                                                      \
        s##i##3 = fma(x, f3, s##i##3);                                                      \
    }
kernel void conv_wgrad_f32(global float *dw, ulong dwoff, const global float *g, ulong goff,
                           const global float *frame, ulong foff, long m, long n, long kc, int kh, int kw,
                           int dh, int dwid, long wp, long plane, long len, long entries, float beta)
{
    const long r0 = (long)get_global_id(0) * 4, c0 = (long)get_global_id(1) * 4;
    const long taps = (long)kh * kw;
    long offset[4];
    for (int j = 0; j < 4; j++) { /* a column's channel and tap, clamped inside dw */
        const long col = min(c0 + j, n - 1), k = col / taps, t = col - k * taps;
        offset[j] = k * plane + (t / kw) * dh * wp + (t % kw) * dwid;
    }
    float16 s00 = 0.0f, s01 = 0.0f, s02 = 0.0f, s03 = 0.0f, s10 = 0.0f, s11 = 0.0f, s12 = 0.0f, s13 = 0.0f,
            s20 = 0.0f, s21 = 0.0f, s22 = 0.0f, s23 = 0.0f, s30 = 0.0f, s31 = 0.0f, s32 = 0.0f, s33 = 0.0f;
    for (long e = 0; e < entries; e++) {
        const global float *ge = g + goff + e * m * len, *fe = frame + foff + e * kc * plane;
        const global float *g0 = ge + min(r0, m - 1) * len, *g1 = ge + min(r0 + 1, m - 1) * len,
                           *g2 = ge + min(r0 + 2, m - 1) * len, *g3 = ge + min(r0 + 3, m - 1) * len;
        const global float *b0 = fe + offset[0], *b1 = fe + offset[1], *b2 = fe + offset[2],
                           *b3 = fe + offset[3];
        for (long p = 0; p < len; p += 16) {
            const float16 f0 = vload16(0, b0 + p), f1 = vload16(0, b1 + p), f2 = vload16(0, b2 + p),
                          f3 = vload16(0, b3 + p);
            UG_WG_ROW(0) UG_WG_ROW(1) UG_WG_ROW(2) UG_WG_ROW(3)
        }
    }
    const float16 sums[16] = {s00, s01, s02, s03, s10, s11, s12, s13, s20, s21, s22, s23, s30, s31, s32, s33};
    for (int i = 0; i < 4 && r0 + i < m; i++)
        for (int j = 0; j < 4 && c0 + j < n; j++) {
            const float16 v = sums[i * 4 + j];
            const float8 h8 = v.lo + v.hi;
            const float4 h4 = h8.lo + h8.hi;
            const float s = (h4.x + h4.y) + (h4.z + h4.w);
            global float *out = dw + dwoff + (r0 + i) * n + c0 + j;
            *out = beta == 0.0f ? s : s + beta * *out;
        }
}
