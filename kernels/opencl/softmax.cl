/* Softmax and log-softmax of each row: one work-group per row, three sweeps
 * over the row (max, sum of exp(x - max), write), so large logits never
 * overflow. A row holding NaN gives NaN, as in PyTorch. y may alias x:
 * each item reads its element before writing it in the last sweep. */
#define UG_SOFTMAX_KERNEL(T)                                                             \
    kernel void softmax_##T(global UG_T_##T *y, ulong yoff, const global UG_T_##T *x,    \
                            ulong xoff, long cols, int log_mode)                         \
    {                                                                                    \
        local float buf[UG_WG];                                                          \
        const long r = get_group_id(0);                                                  \
        const int lid = get_local_id(0), L = get_local_size(0);                          \
        const long xb = xoff + r * cols, yb = yoff + r * cols;                           \
        float m = -INFINITY;                                                             \
        for (long c = lid; c < cols; c += L)                                             \
            m = ug_max_nan(m, UG_LD_##T(x, xb + c));                                     \
        m = ug_wg_max(buf, m);                                                           \
        float s = 0.0f;                                                                  \
        for (long c = lid; c < cols; c += L)                                             \
            s += exp(UG_LD_##T(x, xb + c) - m);                                          \
        s = ug_wg_sum(buf, s);                                                           \
        if (log_mode) {                                                                  \
            const float ls = log(s);                                                     \
            for (long c = lid; c < cols; c += L)                                         \
                UG_ST_##T(y, yb + c, (UG_LD_##T(x, xb + c) - m) - ls);                   \
        } else {                                                                         \
            for (long c = lid; c < cols; c += L)                                         \
                UG_ST_##T(y, yb + c, exp(UG_LD_##T(x, xb + c) - m) / s);                 \
        }                                                                                \
    }

UG_SOFTMAX_KERNEL(f32)
UG_SOFTMAX_KERNEL(f16)
