/* GEMM through CLBlast's C API: row-major, buffer offsets, leading
 * dimensions and transposes as given; CLBlastSgemm for one matrix,
 * CLBlastSgemmStridedBatched for a batch. K == 0 (which CLBlast rejects)
 * runs our gemm_scale_c kernel: C = beta * C.
 *
 * CLBlast's kernel parameters are measured per device at the first product
 * (gemm_tune.c). On CPU devices (POCL) products with B's rows contiguous,
 * or B transposed and A not, run unigrad's kernels for CPUs instead
 * (gemm.cl's gemm_f32_tiled and gemm_f32_nt): 100 to 150 GFLOP/s on two
 * cores where CLBlast's GPU-shaped kernels reach 50 to 70. */
#include <clblast_c.h>

#include "backends/opencl/internal.h"
#include "backends/gemm_helpers.h"

static ug_status clblast_fail(const char *call, CLBlastStatusCode code, const ug_gemm_args *a)
{
    return ug_opencl_host->set_error(
        code == CLBlastTempBufferAllocFailure || code == CLBlastOpenCLOutOfResources ||
                code == CLBlastOpenCLOutOfHostMemory
            ? UG_ERR_OUT_OF_MEMORY
            : UG_ERR_BACKEND,
        "CLBlast: %s(%s%s, m=%lld n=%lld k=%lld, lda=%lld ldb=%lld ldc=%lld, batch=%lld) "
        "failed: %d %s",
        call, a->trans_a ? "T" : "N", a->trans_b ? "T" : "N", (long long)a->m, (long long)a->n,
        (long long)a->k, (long long)a->lda, (long long)a->ldb, (long long)a->ldc, (long long)a->batch,
        (int)code, ug_opencl_clblast_error_name(code));
}

/* Half operands: unigrad's own kernel (gemm.cl), which accumulates in f32
 * as every backend does; CLBlast's HGEMM would sum in f16. */
static ug_status half_gemm(ug_bdev *dev, const ug_gemm_args *a)
{
    if (a->b.dtype != a->a.dtype || (a->c.dtype != UG_F32 && a->c.dtype != a->a.dtype))
        return ug_opencl_host->set_error(UG_ERR_DTYPE,
                                         "OpenCL: gemm's A and B must share a dtype, and C be f32 or "
                                         "theirs (got %s, %s -> %s)",
                                         ug_dtype_name(a->a.dtype), ug_dtype_name(a->b.dtype),
                                         ug_dtype_name(a->c.dtype));
    const ug_opencl_kernel *k;
    ug_status st = ug_opencl_kernel_for(dev, UG_OPENCL_GEMM_HALF, a->a.dtype, a->c.dtype, &k);
    if (st != UG_OK)
        return st;
    cl_mem c = (cl_mem)a->c.mem, am = (cl_mem)a->a.mem, bm = (cl_mem)a->b.mem;
    cl_ulong coff = (cl_ulong)a->c.offset, aoff = (cl_ulong)a->a.offset,
             boff = (cl_ulong)a->b.offset;
    cl_long m = a->m, n = a->n, kk = a->k, lda = a->lda, ldb = a->ldb, ldc = a->ldc,
            sa = a->stride_a, sb = a->stride_b, sc = a->stride_c, batch = a->batch;
    cl_int ta = a->trans_a, tb = a->trans_b, sum = a->sum_batch;
    cl_float alpha = a->alpha, beta = a->beta;
    ug_opencl_arg args[] = {UG_OPENCL_ARG(c),   UG_OPENCL_ARG(coff), UG_OPENCL_ARG(am),  UG_OPENCL_ARG(aoff),
                            UG_OPENCL_ARG(bm),  UG_OPENCL_ARG(boff), UG_OPENCL_ARG(m),   UG_OPENCL_ARG(n),
                            UG_OPENCL_ARG(kk),  UG_OPENCL_ARG(lda),  UG_OPENCL_ARG(ldb), UG_OPENCL_ARG(ldc),
                            UG_OPENCL_ARG(sa),  UG_OPENCL_ARG(sb),   UG_OPENCL_ARG(sc),  UG_OPENCL_ARG(batch),
                            UG_OPENCL_ARG(ta),  UG_OPENCL_ARG(tb),   UG_OPENCL_ARG(sum), UG_OPENCL_ARG(alpha),
                            UG_OPENCL_ARG(beta)};
    const size_t local[3] = {16, 16, 1};
    const size_t global[3] = {ug_opencl_round_up((size_t)a->n, 16), ug_opencl_round_up((size_t)a->m, 16),
                              a->sum_batch ? 1 : (size_t)a->batch};
    return ug_opencl_launch(dev, k, 3, global, local, args, sizeof args / sizeof args[0]);
}

/* f32 on a CPU device: gemm_f32_tiled, or gemm_f32_nt for B transposed;
 * with sum_batch one launch whose items sum the entries (a convolution's
 * weight gradient over a batch of images: one launch where a launch an
 * image, its B copied transposed, took four times as long). */
static ug_status tiled_gemm(ug_bdev *dev, const ug_gemm_args *a)
{
    const ug_opencl_kernel *k;
    ug_status st =
        ug_opencl_kernel_for(dev, a->trans_b ? UG_OPENCL_GEMM_NT : UG_OPENCL_GEMM_TILED, UG_F32, UG_F32, &k);
    if (st != UG_OK)
        return st;
    cl_mem c = (cl_mem)a->c.mem, am = (cl_mem)a->a.mem, bm = (cl_mem)a->b.mem;
    cl_ulong coff = (cl_ulong)a->c.offset, aoff = (cl_ulong)a->a.offset, boff = (cl_ulong)a->b.offset;
    cl_long m = a->m, n = a->n, kk = a->k, lda = a->lda, ldb = a->ldb, ldc = a->ldc, sa = a->stride_a,
            sb = a->stride_b, sc = a->stride_c, entries = a->sum_batch ? a->batch : 1;
    cl_int ta = a->trans_a;
    cl_float alpha = a->alpha, beta = a->beta;
    ug_opencl_arg args[] = {UG_OPENCL_ARG(c),    UG_OPENCL_ARG(coff),  UG_OPENCL_ARG(am),
                            UG_OPENCL_ARG(aoff), UG_OPENCL_ARG(bm),    UG_OPENCL_ARG(boff),
                            UG_OPENCL_ARG(m),    UG_OPENCL_ARG(n),     UG_OPENCL_ARG(kk),
                            UG_OPENCL_ARG(lda),  UG_OPENCL_ARG(ldb),   UG_OPENCL_ARG(ldc),
                            UG_OPENCL_ARG(sa),   UG_OPENCL_ARG(sb),    UG_OPENCL_ARG(sc),
                            UG_OPENCL_ARG(entries), UG_OPENCL_ARG(ta), UG_OPENCL_ARG(alpha),
                            UG_OPENCL_ARG(beta)};
    const size_t local[3] = {1, 1, 1};
    /* gemm_f32_nt: row tiles along the first dimension (gemm.cl says why) */
    const size_t global[3] = {a->trans_b ? ((size_t)a->m + 3) / 4 : ((size_t)a->n + 31) / 32,
                              a->trans_b ? ((size_t)a->n + 3) / 4 : ((size_t)a->m + 7) / 8,
                              a->sum_batch ? 1 : (size_t)a->batch};
    return ug_opencl_launch(dev, k, 3, global, local, args, sizeof args / sizeof args[0]);
}

/* A B^T with a short K (a GPT's linear layers, K = 128) on CPU devices:
 * gemm_f32_nt's tile sums 16 products at a time along K and then across
 * its registers, which a short K does not pay for (40 GFLOP/s against
 * gemm_f32_tiled's 90), so B is copied transposed (copy_rows) into a
 * buffer of its own and the product taken by gemm_f32_tiled. The buffer
 * is released once queued: OpenCL keeps it until the kernels are done. */
static ug_status transposed_b_gemm(ug_bdev *dev, const ug_gemm_args *a)
{
    cl_int err;
    cl_mem bt = clCreateBuffer(dev->context, CL_MEM_READ_WRITE, (size_t)(a->n * a->k) * sizeof(float), NULL, &err);
    if (!bt)
        return ug_opencl_fail(ug_opencl_status_of(err), "clCreateBuffer for B transposed", err);
    ug_unary_args copy = {.op = UG_UNARY_COPY,
                          .y = {.mem = bt, .offset = 0, .dtype = UG_F32},
                          .x = a->b,
                          .ndim = 2,
                          .shape = {a->k, a->n},
                          .x_strides = {1, a->ldb}};
    ug_status st = ug_opencl_unary(dev, &copy);
    ug_gemm_args nn = *a;
    nn.trans_b = false;
    nn.b = (ug_kview){.mem = bt, .offset = 0, .dtype = UG_F32};
    nn.ldb = a->n;
    if (st == UG_OK)
        st = tiled_gemm(dev, &nn);
    clReleaseMemObject(bt);
    return st;
}

static ug_status gemm_product(ug_bdev *dev, const ug_gemm_args *a)
{
    if (a->m <= 0 || a->n <= 0 || a->batch <= 0)
        return UG_OK;
    if (a->a.dtype != UG_F32)
        return half_gemm(dev, a);
    /* On CPU devices the own kernels sum a batch in one launch (gemm_f32_nt
     * where K is a multiple of its 16-wide steps) */
    const bool own_sum = dev->is_cpu && a->k > 0 &&
                         (a->trans_b ? !a->trans_a && a->k % 16 == 0 : a->n >= 32);
    if (a->sum_batch && !own_sum)
        return ug_gemm_sum_batch_by_loop(dev, a, gemm_product);
    if (a->a.dtype != UG_F32 || a->b.dtype != UG_F32 || a->c.dtype != UG_F32)
        return ug_opencl_host->set_error(UG_ERR_DTYPE, "OpenCL: gemm takes f32 only");
    ug_opencl_gemm_ready(dev);
    cl_mem c = (cl_mem)a->c.mem;

    if (a->k <= 0) {
        /* op(A) op(B) is an empty sum: C = beta * C, per batch. */
        cl_ulong coff = (cl_ulong)a->c.offset;
        cl_long m = a->m, n = a->n, ldc = a->ldc, stride = a->stride_c;
        cl_long total = a->m * a->n * (a->stride_c ? a->batch : 1);
        cl_float beta = a->beta;
        ug_opencl_arg args[] = {UG_OPENCL_ARG(c),     UG_OPENCL_ARG(coff), UG_OPENCL_ARG(m),
                                UG_OPENCL_ARG(n),     UG_OPENCL_ARG(ldc),  UG_OPENCL_ARG(stride),
                                UG_OPENCL_ARG(total), UG_OPENCL_ARG(beta)};
        const ug_opencl_kernel *k;
        ug_status st = ug_opencl_kernel_for(dev, UG_OPENCL_GEMM_SCALE_C, UG_F32, UG_F32, &k);
        return st != UG_OK ? st : ug_opencl_launch_1d(dev, k, (size_t)total, args, 8);
    }

    /* On CPU devices the own kernels where they apply (gemm_f32_tiled's
     * tile needs 32 columns): POCL's MLP step runs in a third of the time
     * it takes with CLBlast's. */
    if (dev->is_cpu && a->trans_b && !a->trans_a && a->k < 512 && a->n >= 32 && a->batch == 1)
        return transposed_b_gemm(dev, a);
    if (dev->is_cpu && (a->trans_b ? !a->trans_a : a->n >= 32))
        return tiled_gemm(dev, a);

    CLBlastTranspose ta = a->trans_a ? CLBlastTransposeYes : CLBlastTransposeNo;
    CLBlastTranspose tb = a->trans_b ? CLBlastTransposeYes : CLBlastTransposeNo;
    CLBlastStatusCode code;
    /* CLBlast creates its own kernel objects per call, but our lock keeps
     * GEMMs ordered with the launches of other threads the same way. */
    cl_command_queue queue = ug_opencl_current(dev)->queue;
    pthread_mutex_lock(&dev->launch_lock);
    if (a->batch == 1) {
        code = CLBlastSgemm(CLBlastLayoutRowMajor, ta, tb, (size_t)a->m, (size_t)a->n,
                            (size_t)a->k, a->alpha, (cl_mem)a->a.mem, (size_t)a->a.offset,
                            (size_t)a->lda, (cl_mem)a->b.mem, (size_t)a->b.offset,
                            (size_t)a->ldb, a->beta, c, (size_t)a->c.offset, (size_t)a->ldc,
                            &queue, NULL);
    } else {
        code = CLBlastSgemmStridedBatched(
            CLBlastLayoutRowMajor, ta, tb, (size_t)a->m, (size_t)a->n, (size_t)a->k, a->alpha,
            (cl_mem)a->a.mem, (size_t)a->a.offset, (size_t)a->lda, (size_t)a->stride_a,
            (cl_mem)a->b.mem, (size_t)a->b.offset, (size_t)a->ldb, (size_t)a->stride_b,
            a->beta, c, (size_t)a->c.offset, (size_t)a->ldc, (size_t)a->stride_c,
            (size_t)a->batch, &queue, NULL);
    }
    pthread_mutex_unlock(&dev->launch_lock);
    if (code != CLBlastSuccess)
        return clblast_fail(a->batch == 1 ? "CLBlastSgemm" : "CLBlastSgemmStridedBatched", code, a);
    return UG_OK;
}

void ug_opencl_gemm_release(void)
{
    CLBlastClearCache();
}

/* The product, then a graph's epilogue folded in (ug_gemm_args): CLBlast
 * takes none, so one binary launch after it. */
ug_status ug_opencl_gemm(ug_bdev *dev, const ug_gemm_args *a)
{
    ug_status st = gemm_product(dev, a);
    return st == UG_OK ? ug_gemm_epilogue_by_binary(dev, a, ug_opencl_binary) : st;
}
