/* Launching the module's own GEMM (kernels/hip/gemm.h), behind ug_hip_gemm
 * (gemm.cpp): the grid of each kernel, the slices of a split K, and the
 * path that suits a shape untimed (gemm_choice.cpp times the others). */
#include "backends/hip/launchers.h"
#include "kernels/hip/gemm.h"

/* launch_as(A's type tag, C's type tag): C is f32 or A's type. */
template <typename F> static ug_status with_types(const ug_gemm_args *a, F &&launch_as)
{
    return ug_with_type(a->a.dtype, [&](auto ta) {
        if (a->c.dtype == UG_F32)
            launch_as(ta, ug_type_tag<float>());
        else
            launch_as(ta, ta);
        return ug_hip_launched("gemm");
    });
}

/* A tile kernel's grid for R (4 or 8) outputs per thread along each axis:
 * x the tiles across n, y across m (capped: the kernel loops past it), z
 * the matrices of C (capped as well). */
template <int R> static ug_status tile_grid(const ug_gemm_args *a, dim3 *grid)
{
    constexpr int T = 16 * R;
    const int64_t tiles_n = (a->n + T - 1) / T, tiles_m = (a->m + T - 1) / T;
    const int64_t outputs = a->sum_batch ? 1 : a->batch;
    if (tiles_n > INT32_MAX / 256)
        return ug_hip_host->set_error(UG_ERR_UNSUPPORTED, "%s: gemm with n = %lld is too wide",
                                      UG_HIP_BACKEND, (long long)a->n);
    *grid = dim3((unsigned)tiles_n, (unsigned)(tiles_m < UG_HIP_MAX_GRID ? tiles_m : UG_HIP_MAX_GRID),
                 (unsigned)(outputs < UG_HIP_MAX_GRID ? outputs : UG_HIP_MAX_GRID));
    return UG_OK;
}

template <int R>
static ug_status launch(ug_bdev *dev, const ug_gemm_args *a, const gemm_k &g)
{
    dim3 grid;
    ug_status st = tile_grid<R>(a, &grid);
    if (st != UG_OK)
        return st;
    hipStream_t stream = ug_hip_current(dev)->stream;
    return with_types(a, [&](auto ta, auto tc) {
        typedef typename decltype(ta)::type TA;
        typedef typename decltype(tc)::type TC;
        if constexpr (R == 8)
            ug_gemm128_kernel<TA, TC><<<grid, 256, 0, stream>>>(g);
        else
            ug_gemm64_kernel<TA, TC><<<grid, 256, 0, stream>>>(g);
    });
}

static ug_status launch_dot(ug_bdev *dev, const ug_gemm_args *a, const gemm_k &g)
{
    const int64_t outputs = a->m * a->n * (a->sum_batch ? 1 : a->batch);
    const unsigned blocks = ug_hip_blocks(outputs, DOT_GROUPS);
    hipStream_t stream = ug_hip_current(dev)->stream;
    return with_types(a, [&](auto ta, auto tc) {
        typedef typename decltype(ta)::type TA;
        typedef typename decltype(tc)::type TC;
        ug_gemm_dot_kernel<TA, TC><<<blocks, DOT_LANES * DOT_GROUPS, 0, stream>>>(g);
    });
}

/* K's slices for a split product: enough for two blocks an SM, each slice
 * at least SPLIT_DEPTH deep and a multiple of TK; 1: no split (a batch,
 * too short a K, partials too large for the scratch, or more tiles than
 * the stream has block counts). A block of a small C waits out its loads
 * at every step of K, so short slices (an MLP's first layer, 64x500 over
 * 784: 17 slices of three steps) cost little more than their partials'
 * sums, whose loads are in flight together. */
constexpr int64_t SPLIT_DEPTH = 32, SPLIT_MAX = 64;
constexpr double SPLIT_SCRATCH_LIMIT = 64.0 * (1 << 20); /* bytes of partials */
static int64_t split_slices(const ug_bdev *dev, const ug_gemm_args *a, int64_t *depth)
{
    if (a->batch != 1 || a->sum_batch || a->k < 2 * SPLIT_DEPTH)
        return 1;
    const int64_t tiles = ((a->m + 63) / 64) * ((a->n + 63) / 64);
    int64_t s = (2 * (int64_t)dev->sm_count + tiles - 1) / tiles;
    s = s < a->k / SPLIT_DEPTH ? s : a->k / SPLIT_DEPTH;
    s = s < SPLIT_MAX ? s : SPLIT_MAX;
    if (s < 2 || tiles > UG_HIP_BLOCK_COUNTS || (double)s * (double)a->m * (double)a->n * 4.0 > SPLIT_SCRATCH_LIMIT)
        return 1;
    *depth = ((a->k + s - 1) / s + TK - 1) / TK * TK;
    return (a->k + *depth - 1) / *depth;
}

static ug_status launch_split(ug_bdev *dev, const ug_gemm_args *a, const gemm_k &g)
{
    int64_t depth = 0;
    const int64_t splits = split_slices(dev, a, &depth);
    if (splits < 2)
        return launch<4>(dev, a, g);
    void *scratch;
    ug_status st = ug_hip_scratch(dev, (size_t)(splits * a->m * a->n) * sizeof(float), &scratch);
    if (st != UG_OK)
        return st;
    /* Slice e of K as batch entry e, its partial C at scratch + e m n. */
    gemm_k p = g;
    p.k = depth;
    p.k_whole = a->k;
    p.batch = splits;
    p.sa = a->trans_a ? depth * a->lda : depth;
    p.sb = a->trans_b ? depth : depth * a->ldb;
    p.c = scratch;
    p.ldc = a->n;
    p.sc = a->m * a->n;
    p.alpha = 1.0f;
    p.beta = 0.0f;
    p.e = NULL; /* applied once, with the sums */
    p.post = UG_UNARY_COPY;
    ug_gemm_args partial = *a;
    partial.batch = splits;
    dim3 grid;
    if ((st = tile_grid<4>(&partial, &grid)) != UG_OK)
        return st;
    ug_hip_queue *q = ug_hip_current(dev);
    return with_types(a, [&](auto ta, auto tc) {
        typedef typename decltype(ta)::type TA;
        typedef typename decltype(tc)::type TC;
        ug_gemm_split_kernel<TA, TC><<<grid, 256, 0, q->stream>>>(p, g, q->block_counts);
    });
}

ug_status ug_hip_gemm_hold(ug_bdev *dev, long long cycles)
{
    hipStream_t stream = ug_hip_current(dev)->stream;
    ug_gemm_hold_kernel<<<1, 1, 0, stream>>>(cycles);
    return ug_hip_launched("gemm timing's hold");
}

/* The dot kernel's widest C worth timing: a group of threads an output
 * reads each operand once per output, which past this many loses to the
 * tiles by far (an H100's 2048x2048: 35 ms against 0.7), and timing it
 * would cost more than any product it could win. */
constexpr int64_t DOT_MAX_OUTPUTS = 65536;

bool ug_hip_gemm_own_fits(const ug_bdev *dev, const ug_gemm_args *a, int path)
{
    int64_t depth;
    if (path == UG_HIP_GEMM_OWN_DOT)
        return a->m * a->n * (a->sum_batch ? 1 : a->batch) <= DOT_MAX_OUTPUTS;
    return path != UG_HIP_GEMM_OWN_SPLIT || split_slices(dev, a, &depth) > 1;
}

int ug_hip_gemm_default_path(const ug_bdev *dev, const ug_gemm_args *a)
{
    const int64_t outputs = a->sum_batch ? 1 : a->batch;
    /* A C of a few thousand values over a long K: the dot kernel, whose
     * groups fill more of the GPU than the tiles' few blocks. */
    if (a->m * a->n * outputs <= 4096 && a->k >= 4 * DOT_LANES)
        return UG_HIP_GEMM_OWN_DOT;
    /* Tiles for fewer than half the SMs over a K of 256 or more. */
    const int64_t small = ((a->m + 63) / 64) * ((a->n + 63) / 64) * outputs;
    if (2 * small < dev->sm_count && a->k >= 256 && ug_hip_gemm_own_fits(dev, a, UG_HIP_GEMM_OWN_SPLIT))
        return UG_HIP_GEMM_OWN_SPLIT;
    /* The larger tile once its blocks alone fill every SM. */
    const int64_t big = ((a->m + 127) / 128) * ((a->n + 127) / 128) * outputs;
    return big >= dev->sm_count ? UG_HIP_GEMM_OWN_128 : UG_HIP_GEMM_OWN_64;
}

ug_status ug_hip_gemm_own_path(ug_bdev *dev, const ug_gemm_args *a, int path)
{
    if (a->m <= 0 || a->n <= 0 || a->batch <= 0)
        return UG_OK;
    ug_status st = ug_hip_enter(dev);
    if (st != UG_OK)
        return st;
    gemm_k g;
    g.ta = a->trans_a;
    g.tb = a->trans_b;
    g.sum_batch = a->sum_batch;
    g.m = a->m;
    g.n = a->n;
    g.k = a->k;
    g.lda = a->lda;
    g.ldb = a->ldb;
    g.ldc = a->ldc;
    g.sa = a->stride_a;
    g.sb = a->stride_b;
    g.sc = a->stride_c;
    g.batch = a->batch;
    g.alpha = a->alpha;
    g.beta = a->beta;
    g.a = ug_hip_ptr(&a->a);
    g.b = ug_hip_ptr(&a->b);
    g.c = ug_hip_ptr(&a->c);
    g.k_whole = 0;
    g.e = ug_hip_ptr(&a->epi.operand);
    g.e_rows = a->epi.operand_rows;
    g.e_op = a->epi.op;
    g.e_alpha = a->epi.alpha;
    g.e_first = a->epi.first;
    g.post = a->epi.post;
    return path == UG_HIP_GEMM_OWN_DOT     ? launch_dot(dev, a, g)
           : path == UG_HIP_GEMM_OWN_SPLIT ? launch_split(dev, a, g)
           : path == UG_HIP_GEMM_OWN_128 ? launch<8>(dev, a, g)
                                         : launch<4>(dev, a, g);
}

ug_status ug_hip_gemm_own(ug_bdev *dev, const ug_gemm_args *a)
{
    const int forced = ug_hip_gemm_forced_path();
    return ug_hip_gemm_own_path(dev, a, forced >= 0 ? forced : ug_hip_gemm_default_path(dev, a));
}
