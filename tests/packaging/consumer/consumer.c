/* Built outside the unigrad tree against an installed unigrad: opens the
 * CPU device, adds two tensors (one broadcast) and checks every element.
 * Exits 0 on success, 1 on a wrong number, 2 on a library error. */
#include <stdio.h>

#include <unigrad/unigrad.h>

static int fail(const char *what)
{
    fprintf(stderr, "consumer: %s: %s\n", what, ug_last_error());
    return 2;
}

int main(void)
{
    const float a[6] = {1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f};
    const float b[3] = {10.0f, 20.0f, 30.5f};
    const float expected[6] = {11.0f, 22.0f, 33.5f, 14.0f, 25.0f, 36.5f};
    const int64_t a_shape[2] = {2, 3}, b_shape[1] = {3};
    ug_device *device = NULL;
    ug_tensor *ta = NULL, *tb = NULL, *sum = NULL;
    float out[6] = {0};
    int status = 0;

    if (ug_device_open("cpu", &device) != UG_OK)
        return fail("ug_device_open(\"cpu\")");
    if (ug_tensor_from_host(device, UG_F32, 2, a_shape, a, &ta) != UG_OK ||
        ug_tensor_from_host(device, UG_F32, 1, b_shape, b, &tb) != UG_OK) {
        status = fail("ug_tensor_from_host");
    } else if (ug_add(ta, tb, &sum) != UG_OK) {
        status = fail("ug_add");
    } else if (ug_tensor_ndim(sum) != 2 || ug_tensor_dim(sum, 0) != 2 ||
               ug_tensor_dim(sum, 1) != 3) {
        fprintf(stderr, "consumer: ug_add gave shape %s, expected [2,3]\n",
                ug_tensor_shape_string(sum, (char[32]){0}, 32));
        status = 1;
    } else if (ug_tensor_download(sum, out, sizeof out) != UG_OK) {
        status = fail("ug_tensor_download");
    } else {
        for (int i = 0; i < 6; i++) {
            /* Sums of small integers and halves are exact in f32. */
            if (out[i] != expected[i]) {
                fprintf(stderr, "consumer: element %d is %g, expected %g\n", i,
                        (double)out[i], (double)expected[i]);
                status = 1;
            }
        }
    }
    if (status == 0)
        printf("consumer: %s: [[%g %g %g] [%g %g %g]] as expected\n", ug_device_name(device),
               (double)out[0], (double)out[1], (double)out[2], (double)out[3],
               (double)out[4], (double)out[5]);
    ug_tensor_free(sum);
    ug_tensor_free(tb);
    ug_tensor_free(ta);
    ug_device_close(device);
    return status;
}
