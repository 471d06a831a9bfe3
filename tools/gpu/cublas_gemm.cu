// The vendor ceiling for `ug-bench gemm --device cuda:0`: cublasSgemm called
// directly, on the same products (tools/bench_gemm.c's list, row-major C =
// op(A) op(B)), timed with CUDA events for about 0.3 s each after a warm-up.
// Built and run by bench.sh on the GPU machine: nvcc cublas_gemm.cu -lcublas
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK_CUDA(call)                                                                 \
    do {                                                                                 \
        cudaError_t e_ = (call);                                                         \
        if (e_ != cudaSuccess) {                                                         \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)
#define CHECK_CUBLAS(call)                                                               \
    do {                                                                                 \
        cublasStatus_t s_ = (call);                                                      \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                               \
            fprintf(stderr, "%s:%d: %s: status %d\n", __FILE__, __LINE__, #call, (int)s_); \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

struct shape {
    const char *name;
    int m, n, k;
    bool trans_a, trans_b;
};

static const shape shapes[] = {
    {"square 256", 256, 256, 256, false, false},     {"square 512", 512, 512, 512, false, false},
    {"square 1024", 1024, 1024, 1024, false, false}, {"square 2048", 2048, 2048, 2048, false, false},
    {"fc1 fwd X.W1^T", 64, 500, 784, false, true},   {"fc1 dW dY^T.X", 500, 784, 64, true, false},
    {"fc1 dX dY.W1", 64, 784, 500, false, false},    {"fc2 fwd H.W2^T", 64, 10, 500, false, true},
    {"fc2 dW dY^T.H", 10, 500, 64, true, false},     {"fc2 dX dY.W2", 64, 500, 10, false, false},
};

int main()
{
    cublasHandle_t handle;
    CHECK_CUBLAS(cublasCreate(&handle));
    // Plain f32 arithmetic, as ug_matmul's f32 contract (no TF32).
    CHECK_CUBLAS(cublasSetMathMode(handle, CUBLAS_PEDANTIC_MATH));
    cudaEvent_t start, stop;
    CHECK_CUDA(cudaEventCreate(&start));
    CHECK_CUDA(cudaEventCreate(&stop));
    printf("%-16s %5s %5s %5s %10s %10s\n", "PRODUCT", "M", "N", "K", "us/call", "GFLOP/s");
    for (const shape &s : shapes) {
        size_t a_count = (size_t)s.m * s.k, b_count = (size_t)s.k * s.n, c_count = (size_t)s.m * s.n;
        std::vector<float> host(a_count > b_count ? a_count : b_count);
        for (float &v : host)
            v = (float)rand() / RAND_MAX - 0.5f; // random data: zeros run faster
        float *a, *b, *c;
        CHECK_CUDA(cudaMalloc(&a, a_count * sizeof(float)));
        CHECK_CUDA(cudaMalloc(&b, b_count * sizeof(float)));
        CHECK_CUDA(cudaMalloc(&c, c_count * sizeof(float)));
        CHECK_CUDA(cudaMemcpy(a, host.data(), a_count * sizeof(float), cudaMemcpyHostToDevice));
        CHECK_CUDA(cudaMemcpy(b, host.data(), b_count * sizeof(float), cudaMemcpyHostToDevice));
        const float one = 1.0f, zero = 0.0f;
        // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T.
        auto run = [&] {
            CHECK_CUBLAS(cublasSgemm(handle, s.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                     s.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, s.n, s.m, s.k, &one, b,
                                     s.trans_b ? s.k : s.n, a, s.trans_a ? s.m : s.k, &zero, c, s.n));
        };
        for (int i = 0; i < 10; i++)
            run();
        int reps = 10;
        float ms = 0.0f;
        for (;;) { // grow the count until one timing lasts 0.3 s
            CHECK_CUDA(cudaEventRecord(start));
            for (int i = 0; i < reps; i++)
                run();
            CHECK_CUDA(cudaEventRecord(stop));
            CHECK_CUDA(cudaEventSynchronize(stop));
            CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
            if (ms >= 300.0f || reps >= (1 << 24))
                break;
            reps *= ms > 1.0f ? (int)(300.0f / ms) + 1 : 100;
        }
        double seconds = ms * 1e-3 / reps;
        printf("%-16s %5d %5d %5d %10.2f %10.1f\n", s.name, s.m, s.n, s.k, seconds * 1e6,
               2.0 * s.m * s.n * s.k / seconds * 1e-9);
        CHECK_CUDA(cudaFree(a));
        CHECK_CUDA(cudaFree(b));
        CHECK_CUDA(cudaFree(c));
    }
    CHECK_CUDA(cudaEventDestroy(start));
    CHECK_CUDA(cudaEventDestroy(stop));
    CHECK_CUBLAS(cublasDestroy(handle));
    return 0;
}
