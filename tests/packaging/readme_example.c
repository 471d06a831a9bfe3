#include <stdio.h>
#include <unigrad/unigrad.h>

/* Every call returns a ug_status; ug_last_error() says what went wrong. */
#define CHECK(call) do { if ((call) != UG_OK) { \
    fprintf(stderr, "error: %s\n", ug_last_error()); return 1; } } while (0)

int main(void) {
    ug_device *dev;
    CHECK(ug_device_open("auto", &dev));  /* a GPU if there is one; UG_DEVICE overrides */
    const float x[6] = {1, 2, 3, 4, 5, 6}, w[6] = {1, 0, 0, 1, 1, 1};
    const int64_t x_shape[2] = {2, 3}, w_shape[2] = {3, 2};
    ug_tensor *a, *b, *y;
    CHECK(ug_tensor_from_host(dev, UG_F32, 2, x_shape, x, &a));
    CHECK(ug_tensor_from_host(dev, UG_F32, 2, w_shape, w, &b));
    CHECK(ug_matmul(a, b, false, false, &y));  /* [2,3] x [3,2] -> [2,2] */
    float out[4];
    CHECK(ug_tensor_download(y, out, sizeof out));  /* waits for the result */
    printf("%s: [[%g, %g], [%g, %g]]\n", ug_device_name(dev), out[0], out[1], out[2], out[3]);
    ug_tensor_free(y);
    ug_tensor_free(b);
    ug_tensor_free(a);
    ug_device_close(dev);
    return 0;
}
