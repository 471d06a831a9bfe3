/* C = beta * C for a GEMM with K == 0, which CLBlast rejects. beta == 0
 * writes zeros without reading C (BLAS rule: C may hold NaN garbage). */
kernel void gemm_scale_c(global float *c, ulong coff, long m, long n, long ldc, long stride,
                         long total, float beta)
{
    const long i = get_global_id(0);
    if (i >= total)
        return;
    const long mn = m * n;
    const long bt = i / mn;
    const long r = i - bt * mn;
    const long row = r / n;
    const long p = coff + bt * stride + row * ldc + (r - row * n);
    c[p] = beta == 0.0f ? 0.0f : beta * c[p];
}
