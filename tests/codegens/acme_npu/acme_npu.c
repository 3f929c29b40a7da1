/* A toy accelerator library for the tests: a convolution that only understands NHWC data and
 * OHWI kernels, followed by relu. Called through the "dltensor" convention with the conv2d's
 * strides, padding (top, left, bottom, right) and dilation as trailing int64_t values. */
#include <stddef.h>
#include <stdint.h>

#include "relaycc_dlpack.h"

enum { ACME_OK = 0, ACME_BAD_RANK = 1, ACME_BAD_SHAPE = 2, ACME_BAD_DTYPE = 3 };

static int is_f32(const DLTensor* t) {
  return t->dtype.code == kDLFloat && t->dtype.bits == 32 && t->dtype.lanes == 1;
}

int32_t acme_conv2d_relu_nhwc_ohwi(DLTensor* data, DLTensor* weight, DLTensor* out,
                                   int64_t stride_h, int64_t stride_w,
                                   int64_t pad_top, int64_t pad_left, int64_t pad_bottom, int64_t pad_right,
                                   int64_t dilation_h, int64_t dilation_w) {
  if (data->ndim != 4 || weight->ndim != 4 || out->ndim != 4) return ACME_BAD_RANK;
  if (!is_f32(data) || !is_f32(weight) || !is_f32(out)) return ACME_BAD_DTYPE;
  const int64_t n = data->shape[0], h = data->shape[1], w = data->shape[2], c = data->shape[3];
  const int64_t o = weight->shape[0], kh = weight->shape[1], kw = weight->shape[2];
  const int64_t oh = out->shape[1], ow = out->shape[2];
  if (weight->shape[3] != c || out->shape[0] != n || out->shape[3] != o) return ACME_BAD_SHAPE;
  if (oh != (h + pad_top + pad_bottom - dilation_h * (kh - 1) - 1) / stride_h + 1 ||
      ow != (w + pad_left + pad_right - dilation_w * (kw - 1) - 1) / stride_w + 1) {
    return ACME_BAD_SHAPE;
  }
  const float* x = (const float*)data->data;
  const float* k = (const float*)weight->data;
  float* y = (float*)out->data;
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t i = 0; i < oh; ++i) {
      for (int64_t j = 0; j < ow; ++j) {
        for (int64_t f = 0; f < o; ++f) {
          float acc = 0.0f;
          for (int64_t di = 0; di < kh; ++di) {
            const int64_t yi = i * stride_h + di * dilation_h - pad_top;
            if (yi < 0 || yi >= h) continue;
            for (int64_t dj = 0; dj < kw; ++dj) {
              const int64_t xj = j * stride_w + dj * dilation_w - pad_left;
              if (xj < 0 || xj >= w) continue;
              for (int64_t ch = 0; ch < c; ++ch) {
                acc += x[((b * h + yi) * w + xj) * c + ch] * k[((f * kh + di) * kw + dj) * c + ch];
              }
            }
          }
          y[((b * oh + i) * ow + j) * o + f] = acc > 0.0f ? acc : 0.0f;
        }
      }
    }
  }
  return ACME_OK;
}
