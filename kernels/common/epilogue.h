/* An epilogue's math (backends/backend.h's ug_epilogue), written once for
 * every dialect as elementwise.h writes the ops': what a kernel does to a
 * result r before it stores it. The CPU backend (C11), the OpenCL kernels
 * (the host puts this file ahead of the .cl sources, after elementwise.h)
 * and the HIP/CUDA kernels call these; the memory an epilogue writes (a
 * check's flag, a running sum) each dialect writes through its own
 * pointers, with the values these give. Include elementwise.h first. */
#ifndef UG_KERNELS_COMMON_EPILOGUE_H
#define UG_KERNELS_COMMON_EPILOGUE_H

/* r after the pair (r op e, or e op r where first; where pair) and the
 * post-op (UG_UNARY_COPY: none), as the unfused ops would compute it: the
 * same bits. */
UG_MATH_FN float ug_epilogue_value(int pair, int op, float alpha, int first, float e, int post, float r)
{
    if (pair)
        r = first ? ug_binary_op(op, e, r, alpha) : ug_binary_op(op, r, e, alpha);
    return post == UG_UNARY_COPY ? r : ug_unary_op(post, r, 0.0f, 0.0f);
}

/* The equality test folded in: 1 where r equals m (both as f32), else 0,
 * as UG_BINARY_EQUAL computes it. */
UG_MATH_FN float ug_epilogue_match(float r, float m) { return ug_binary_op(UG_BINARY_EQUAL, r, m, 0.0f); }

/* Whether v sets a numeric check's flag: NaN or infinite (v - v is NaN
 * exactly then). */
UG_MATH_FN int ug_nonfinite(float v) { return v - v != 0.0f; }

#endif
