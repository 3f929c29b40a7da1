/* A toy vendor library for the toy_cg_thflow codegen of the tests: fully connected layers
 * through the "dltensor" calling convention (inputs, then outputs, as DLTensor*).
 * Every entry checks what it is given and returns non-zero on a mismatch, as a real library
 * would, so a test can tell a wrong call from a wrong result. */
#include <stddef.h>
#include <stdint.h>

#include "relaycc_dlpack.h"

enum { TOY_OK = 0, TOY_BAD_RANK = 1, TOY_BAD_SHAPE = 2, TOY_BAD_DTYPE = 3 };

static int is_f32(const DLTensor* t) {
  return t->dtype.code == kDLFloat && t->dtype.bits == 32 && t->dtype.lanes == 1 && t->strides == NULL;
}

/* out[n, k] = sum_c data[n, c] * weight[k, c] + bias[k], then relu when asked. */
static int32_t dense_bias_impl(const DLTensor* data, const DLTensor* weight, const DLTensor* bias,
                               DLTensor* out, int relu) {
  if (data->ndim != 2 || weight->ndim != 2 || bias->ndim != 1 || out->ndim != 2) return TOY_BAD_RANK;
  if (!is_f32(data) || !is_f32(weight) || !is_f32(bias) || !is_f32(out)) return TOY_BAD_DTYPE;
  int64_t n = data->shape[0], c = data->shape[1], k = weight->shape[0];
  if (weight->shape[1] != c || bias->shape[0] != k || out->shape[0] != n || out->shape[1] != k) {
    return TOY_BAD_SHAPE;
  }
  const float* x = (const float*)data->data;
  const float* w = (const float*)weight->data;
  const float* b = (const float*)bias->data;
  float* y = (float*)out->data;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < k; ++j) {
      float acc = b[j];
      for (int64_t m = 0; m < c; ++m) acc += x[i * c + m] * w[j * c + m];
      y[i * k + j] = (relu && acc < 0.0f) ? 0.0f : acc;
    }
  }
  return TOY_OK;
}

int32_t dense_bias(DLTensor* data, DLTensor* weight, DLTensor* bias, DLTensor* out) {
  return dense_bias_impl(data, weight, bias, out, 0);
}

int32_t dense_bias_relu(DLTensor* data, DLTensor* weight, DLTensor* bias, DLTensor* out) {
  return dense_bias_impl(data, weight, bias, out, 1);
}
