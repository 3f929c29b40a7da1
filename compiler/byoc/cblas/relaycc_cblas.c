/* The kernels of relaycc's built-in `cblas` codegen: dense, batch_matmul and NCHW conv2d on
 * float32 tensors, computed by OpenBLAS's cblas_sgemm, with bias_add and relu applied to the
 * product in one pass afterwards.
 *
 * Every kernel follows the `dltensor` calling convention: DLTensor pointers for the inputs (in
 * the composite's parameter order), then for the outputs, then (conv2d only) a scratch tensor,
 * then the pattern's attributes as int64_t values: batch_matmul's transpose_a and transpose_b
 * (0 or 1), conv2d's strides (h, w), padding (top, left, bottom, right) and dilation (h, w).
 * Tensors must be float32, dense and row-major (strides NULL or compact); a kernel checks
 * ranks, dtypes, shapes and attributes before touching memory and returns one of the
 * RELAYCC_CBLAS_* codes below, 0 meaning success.
 *
 * conv2d needs an im2col matrix of C*KH*KW x OH*OW floats (one image at a time). The codegen
 * asks the extern-call codegen for it as a planned scratch buffer (its size in __init__.py must
 * agree with the C*KH*KW*OH*OW*4 bytes checked here), passed as a 1-D uint8 DLTensor right after
 * the output, so it lives in the model's workspace like any intermediate and the kernels
 * never allocate. A 1x1 kernel with unit stride and no padding reads the image directly and
 * ignores the scratch tensor.
 *
 * Threads: the model's own kernels run on OpenMP threads, and OpenBLAS (a pthreads build on
 * Debian) keeps a pool of its own whose idle threads spin for a while after every call. Both
 * pools on the same cores made a transformer block ten times slower at 2 threads than at 1.
 * So OpenBLAS is told to use one thread, and the products are split across the OpenMP threads
 * here (by rows or by columns, whichever is larger; batches by matrix): one pool for the model.
 */

#if defined(__has_include)
#if !__has_include(<cblas.h>)
#error "cblas.h not found: the cblas codegen needs OpenBLAS (Debian: apt-get install libopenblas-dev, or `make apt`)"
#endif
#endif
#include <cblas.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* OpenBLAS's own setter; weak, so that another CBLAS without it still links. */
#pragma weak openblas_set_num_threads
void openblas_set_num_threads(int threads);

#include "relaycc_dlpack.h"

#define RELAYCC_CBLAS_OK 0
#define RELAYCC_CBLAS_NULL_TENSOR 1
#define RELAYCC_CBLAS_BAD_DTYPE 2
#define RELAYCC_CBLAS_BAD_RANK 3
#define RELAYCC_CBLAS_BAD_SHAPE 4
#define RELAYCC_CBLAS_NOT_CONTIGUOUS 5
#define RELAYCC_CBLAS_BAD_ATTR 6
#define RELAYCC_CBLAS_SMALL_SCRATCH 7

/* Whether `t` is a float32 tensor of rank `ndim` whose elements are laid out row-major without
 * gaps; returns 0 or the error code. */
static int check_tensor(const DLTensor *t, int32_t ndim) {
  if (t == NULL) return RELAYCC_CBLAS_NULL_TENSOR;
  if (t->dtype.code != kDLFloat || t->dtype.bits != 32 || t->dtype.lanes != 1)
    return RELAYCC_CBLAS_BAD_DTYPE;
  if (t->ndim != ndim) return RELAYCC_CBLAS_BAD_RANK;
  if (t->strides != NULL) {
    int64_t expected = 1;
    for (int32_t i = ndim - 1; i >= 0; --i) {
      /* A stride along an axis of extent 1 never moves, so any value describes the same memory. */
      if (t->shape[i] != 1 && t->strides[i] != expected) return RELAYCC_CBLAS_NOT_CONTIGUOUS;
      expected *= t->shape[i];
    }
  }
  int64_t count = 1;
  for (int32_t i = 0; i < ndim; ++i) {
    if (t->shape[i] < 0) return RELAYCC_CBLAS_BAD_SHAPE;
    count *= t->shape[i];
  }
  /* An empty tensor needs no memory: DLPack lets its data be NULL (an empty batch). */
  if (t->data == NULL && count != 0) return RELAYCC_CBLAS_NULL_TENSOR;
  return RELAYCC_CBLAS_OK;
}

static float *elements(const DLTensor *t) { return (float *)((char *)t->data + t->byte_offset); }

/* Whether `t` is a 1-D uint8 scratch tensor of at least `bytes` bytes that can hold floats. */
static int check_scratch(const DLTensor *t, int64_t bytes) {
  if (t == NULL || t->data == NULL) return RELAYCC_CBLAS_NULL_TENSOR;
  if (t->dtype.code != kDLUInt || t->dtype.bits != 8 || t->dtype.lanes != 1) return RELAYCC_CBLAS_BAD_DTYPE;
  if (t->ndim != 1) return RELAYCC_CBLAS_BAD_RANK;
  if (t->shape[0] < bytes || ((uintptr_t)t->data + t->byte_offset) % sizeof(float) != 0)
    return RELAYCC_CBLAS_SMALL_SCRATCH;
  return RELAYCC_CBLAS_OK;
}

static inline float relu_if(float v, int relu) { return relu && v < 0.0f ? 0.0f : v; }

/* The dense epilogue: adds bias[j] (when given) to column j of the rows x cols matrix `y` and
 * clamps negatives to zero when `relu` is set, in one sweep over `y`. */
static void epilogue_columns(float *y, const float *bias, int64_t rows, int64_t cols, int relu) {
  if (bias == NULL && !relu) return;
  for (int64_t r = 0; r < rows; ++r) {
    float *row = y + r * cols;
    for (int64_t c = 0; c < cols; ++c) row[c] = relu_if(row[c] + (bias != NULL ? bias[c] : 0.0f), relu);
  }
}

/* The conv2d epilogue: `y` is images x channels planes of `plane` floats; bias[c] (when given)
 * is added to every value of channel c's plane, then negatives are clamped when `relu` is set. */
static void epilogue_channels(float *y, const float *bias, int64_t images, int64_t channels, int64_t plane,
                              int relu) {
  if (bias == NULL && !relu) return;
  for (int64_t i = 0; i < images * channels; ++i) {
    float *values = y + i * plane;
    const float b = bias != NULL ? bias[i % channels] : 0.0f;
    for (int64_t p = 0; p < plane; ++p) values[p] = relu_if(values[p] + b, relu);
  }
}

/* Products with fewer multiply-adds than this run on the calling thread: a fork/join costs as
 * much as a product of this size takes. */
#define RELAYCC_CBLAS_PARALLEL_MACS (1 << 18)

static void single_threaded_blas(void) {
  static int done = 0;
  if (!done && openblas_set_num_threads != NULL) openblas_set_num_threads(1);
  done = 1;
}

static int threads_for(double macs) {
#ifdef _OPENMP
  if (macs >= RELAYCC_CBLAS_PARALLEL_MACS && !omp_in_parallel()) return omp_get_max_threads();
#else
  (void)macs;
#endif
  return 1;
}

/* C (M x N, row-major, ldc) = op(A) . op(B), split into one band of rows (or of columns, when N
 * is the larger) per OpenMP thread, each computed by a single-threaded sgemm. */
static void sgemm_split(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n, int64_t k, const float *a,
                        blasint lda, const float *b, blasint ldb, float *c, blasint ldc) {
  single_threaded_blas();
  const int threads = threads_for((double)m * (double)n * (double)k);
  if (threads <= 1) {
    cblas_sgemm(CblasRowMajor, ta, tb, (blasint)m, (blasint)n, (blasint)k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
    return;
  }
  const int by_rows = m >= n;
  const int64_t extent = by_rows ? m : n;
#pragma omp parallel num_threads(threads)
  {
#ifdef _OPENMP
    const int64_t parts = omp_get_num_threads(), part = omp_get_thread_num();
#else
    const int64_t parts = 1, part = 0;
#endif
    const int64_t first = extent * part / parts, last = extent * (part + 1) / parts;
    if (last > first) {
      if (by_rows) {
        const float *a_rows = ta == CblasNoTrans ? a + first * lda : a + first;
        cblas_sgemm(CblasRowMajor, ta, tb, (blasint)(last - first), (blasint)n, (blasint)k, 1.0f, a_rows, lda, b,
                    ldb, 0.0f, c + first * ldc, ldc);
      } else {
        const float *b_cols = tb == CblasNoTrans ? b + first : b + first * ldb;
        cblas_sgemm(CblasRowMajor, ta, tb, (blasint)m, (blasint)(last - first), (blasint)k, 1.0f, a, lda, b_cols,
                    ldb, 0.0f, c + first, ldc);
      }
    }
  }
}

/* y (M x N) = x (M x K) . w (N x K)^T; an empty reduction gives zeros (BLAS rejects ld = 0). */
static void gemm_xwt(const float *x, const float *w, float *y, int64_t m, int64_t n, int64_t k) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    memset(y, 0, (size_t)(m * n) * sizeof(float));
    return;
  }
  sgemm_split(CblasNoTrans, CblasTrans, m, n, k, x, (blasint)k, w, (blasint)k, y, (blasint)n);
}

/* --- dense: data (..., K), weight (N, K), optional bias (N), out (..., N) ------------------- */

static int dense_impl(const DLTensor *data, const DLTensor *weight, const DLTensor *bias, const DLTensor *out,
                      int relu) {
  if (data == NULL || out == NULL) return RELAYCC_CBLAS_NULL_TENSOR;
  const int32_t rank = data->ndim;
  if (rank < 1) return RELAYCC_CBLAS_BAD_RANK;
  int err = check_tensor(data, rank);
  if (!err) err = check_tensor(weight, 2);
  if (!err) err = check_tensor(out, rank);
  if (!err && bias != NULL) err = check_tensor(bias, 1);
  if (err) return err;
  const int64_t k = data->shape[rank - 1];
  const int64_t n = weight->shape[0];
  if (weight->shape[1] != k || out->shape[rank - 1] != n) return RELAYCC_CBLAS_BAD_SHAPE;
  if (bias != NULL && bias->shape[0] != n) return RELAYCC_CBLAS_BAD_SHAPE;
  int64_t m = 1;
  for (int32_t i = 0; i < rank - 1; ++i) {
    if (out->shape[i] != data->shape[i]) return RELAYCC_CBLAS_BAD_SHAPE;
    m *= data->shape[i];
  }
  if (m == 0 || n == 0) return RELAYCC_CBLAS_OK; /* nothing to write */
  float *y = elements(out);
  gemm_xwt(elements(data), elements(weight), y, m, n, k);
  epilogue_columns(y, bias != NULL ? elements(bias) : NULL, m, n, relu);
  return RELAYCC_CBLAS_OK;
}

int32_t relaycc_cblas_dense(DLTensor *data, DLTensor *weight, DLTensor *out) {
  return dense_impl(data, weight, NULL, out, 0);
}

int32_t relaycc_cblas_dense_bias(DLTensor *data, DLTensor *weight, DLTensor *bias, DLTensor *out) {
  if (bias == NULL) return RELAYCC_CBLAS_NULL_TENSOR;
  return dense_impl(data, weight, bias, out, 0);
}

int32_t relaycc_cblas_dense_bias_relu(DLTensor *data, DLTensor *weight, DLTensor *bias, DLTensor *out) {
  if (bias == NULL) return RELAYCC_CBLAS_NULL_TENSOR;
  return dense_impl(data, weight, bias, out, 1);
}

/* --- batch_matmul: a (Ba, M, K) or (Ba, K, M), b (Bb, K, N) or (Bb, N, K), out (B, M, N) ---- */

int32_t relaycc_cblas_batch_matmul(DLTensor *a, DLTensor *b, DLTensor *out, int64_t transpose_a,
                                   int64_t transpose_b) {
  int err = check_tensor(a, 3);
  if (!err) err = check_tensor(b, 3);
  if (!err) err = check_tensor(out, 3);
  if (err) return err;
  if ((transpose_a != 0 && transpose_a != 1) || (transpose_b != 0 && transpose_b != 1)) return RELAYCC_CBLAS_BAD_ATTR;
  const int64_t batch_a = a->shape[0], batch_b = b->shape[0], batch = out->shape[0];
  const int64_t m = transpose_a ? a->shape[2] : a->shape[1];
  const int64_t k = transpose_a ? a->shape[1] : a->shape[2];
  const int64_t n = transpose_b ? b->shape[1] : b->shape[2];
  const int64_t kb = transpose_b ? b->shape[2] : b->shape[1];
  if (kb != k || out->shape[1] != m || out->shape[2] != n) return RELAYCC_CBLAS_BAD_SHAPE;
  /* Batch dims broadcast like numpy: equal, or one side is 1. */
  if (!((batch_a == batch && batch_b == batch) || (batch_a == 1 && batch_b == batch) ||
        (batch_b == 1 && batch_a == batch)))
    return RELAYCC_CBLAS_BAD_SHAPE;
  if (batch == 0 || m == 0 || n == 0) return RELAYCC_CBLAS_OK; /* nothing to write */
  float *y = elements(out);
  if (batch == 0 || m == 0 || n == 0) return RELAYCC_CBLAS_OK;
  if (k == 0) {
    memset(y, 0, (size_t)(batch * m * n) * sizeof(float));
    return RELAYCC_CBLAS_OK;
  }
  const float *pa = elements(a), *pb = elements(b);
  const CBLAS_TRANSPOSE ta = transpose_a ? CblasTrans : CblasNoTrans;
  const CBLAS_TRANSPOSE tb = transpose_b ? CblasTrans : CblasNoTrans;
  const blasint lda = (blasint)(transpose_a ? m : k), ldb = (blasint)(transpose_b ? k : n);
  if (batch_b == 1 && batch_a == batch && !transpose_a) {
    /* One shared right-hand matrix: the batch stacks into the rows of a single product. */
    sgemm_split(CblasNoTrans, tb, batch * m, n, k, pa, lda, pb, ldb, y, (blasint)n);
    return RELAYCC_CBLAS_OK;
  }
  const int64_t step_a = batch_a == 1 ? 0 : m * k, step_b = batch_b == 1 ? 0 : k * n;
  single_threaded_blas();
  const int threads = threads_for((double)batch * (double)m * (double)n * (double)k);
  if (threads > 1 && batch >= threads) {
    /* A matrix per thread at a time: the batch is the natural split. */
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t i = 0; i < batch; ++i)
      cblas_sgemm(CblasRowMajor, ta, tb, (blasint)m, (blasint)n, (blasint)k, 1.0f, pa + i * step_a, lda,
                  pb + i * step_b, ldb, 0.0f, y + i * m * n, (blasint)n);
    return RELAYCC_CBLAS_OK;
  }
  for (int64_t i = 0; i < batch; ++i)
    sgemm_split(ta, tb, m, n, k, pa + i * step_a, lda, pb + i * step_b, ldb, y + i * m * n, (blasint)n);
  return RELAYCC_CBLAS_OK;
}

/* --- conv2d: data NCHW, weight OIHW, groups 1, out NCHW -------------------------------------- */

typedef struct {
  int64_t stride_h, stride_w, pad_top, pad_left, pad_bottom, pad_right, dilation_h, dilation_w;
} conv_attrs;

/* Unrolls one C x H x W image into the (C*KH*KW) x (OH*OW) matrix whose row (c, ky, kx) holds,
 * for every output position, the input pixel that kernel tap reads (0 in the padding). */
static void im2col(const float *image, float *col, int64_t channels, int64_t height, int64_t width, int64_t kh,
                   int64_t kw, int64_t oh, int64_t ow, const conv_attrs *a) {
  const int threads = threads_for((double)channels * (double)(kh * kw) * (double)(oh * ow));
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
  for (int64_t c = 0; c < channels; ++c) {
    const float *plane = image + c * height * width;
    for (int64_t ky = 0; ky < kh; ++ky) {
      for (int64_t kx = 0; kx < kw; ++kx) {
        float *row = col + ((c * kh + ky) * kw + kx) * oh * ow;
        for (int64_t y = 0; y < oh; ++y) {
          const int64_t iy = y * a->stride_h - a->pad_top + ky * a->dilation_h;
          float *dst = row + y * ow;
          if (iy < 0 || iy >= height) {
            memset(dst, 0, (size_t)ow * sizeof(float));
            continue;
          }
          const float *src = plane + iy * width;
          for (int64_t x = 0; x < ow; ++x) {
            const int64_t ix = x * a->stride_w - a->pad_left + kx * a->dilation_w;
            dst[x] = (ix >= 0 && ix < width) ? src[ix] : 0.0f;
          }
        }
      }
    }
  }
}

static int conv2d_impl(const DLTensor *data, const DLTensor *weight, const DLTensor *bias, const DLTensor *out,
                       const DLTensor *scratch, const conv_attrs *a, int relu) {
  int err = check_tensor(data, 4);
  if (!err) err = check_tensor(weight, 4);
  if (!err) err = check_tensor(out, 4);
  if (!err && bias != NULL) err = check_tensor(bias, 1);
  if (err) return err;
  if (a->stride_h < 1 || a->stride_w < 1 || a->dilation_h < 1 || a->dilation_w < 1 || a->pad_top < 0 ||
      a->pad_left < 0 || a->pad_bottom < 0 || a->pad_right < 0)
    return RELAYCC_CBLAS_BAD_ATTR;
  const int64_t batch = data->shape[0], channels = data->shape[1], height = data->shape[2], width = data->shape[3];
  const int64_t filters = weight->shape[0], kh = weight->shape[2], kw = weight->shape[3];
  if (weight->shape[1] != channels) return RELAYCC_CBLAS_BAD_SHAPE;
  if (bias != NULL && bias->shape[0] != filters) return RELAYCC_CBLAS_BAD_SHAPE;
  const int64_t span_h = (kh - 1) * a->dilation_h + 1, span_w = (kw - 1) * a->dilation_w + 1;
  const int64_t room_h = height + a->pad_top + a->pad_bottom - span_h;
  const int64_t room_w = width + a->pad_left + a->pad_right - span_w;
  if (kh < 1 || kw < 1 || room_h < 0 || room_w < 0) return RELAYCC_CBLAS_BAD_SHAPE;
  const int64_t oh = room_h / a->stride_h + 1, ow = room_w / a->stride_w + 1;
  if (out->shape[0] != batch || out->shape[1] != filters || out->shape[2] != oh || out->shape[3] != ow)
    return RELAYCC_CBLAS_BAD_SHAPE;

  const int64_t patch = channels * kh * kw, positions = oh * ow;
  float *y = elements(out);
  if (batch == 0 || filters == 0) return RELAYCC_CBLAS_OK;
  if (patch == 0) {
    memset(y, 0, (size_t)(batch * filters * positions) * sizeof(float));
    epilogue_channels(y, bias != NULL ? elements(bias) : NULL, batch, filters, positions, relu);
    return RELAYCC_CBLAS_OK;
  }
  const int pointwise = kh == 1 && kw == 1 && a->stride_h == 1 && a->stride_w == 1 && a->pad_top == 0 &&
                        a->pad_left == 0 && a->pad_bottom == 0 && a->pad_right == 0;
  float *col = NULL;
  if (!pointwise) {
    err = check_scratch(scratch, patch * positions * (int64_t)sizeof(float));
    if (err) return err;
    col = elements(scratch);
  }
  const float *image = elements(data), *filter = elements(weight);
  for (int64_t i = 0; i < batch; ++i) {
    const float *x = image + i * channels * height * width;
    if (!pointwise) im2col(x, col, channels, height, width, kh, kw, oh, ow, a);
    /* out_i (filters x positions) = weight (filters x patch) . col (patch x positions) */
    sgemm_split(CblasNoTrans, CblasNoTrans, filters, positions, patch, filter, (blasint)patch, pointwise ? x : col,
                (blasint)positions, y + i * filters * positions, (blasint)positions);
    /* The epilogue runs per image, while its product is still in cache. */
    epilogue_channels(y + i * filters * positions, bias != NULL ? elements(bias) : NULL, 1, filters, positions, relu);
  }
  return RELAYCC_CBLAS_OK;
}

/* The attrs after the tensors: nn.conv2d's strides, padding and dilation, flattened. */
#define RELAYCC_CONV_ATTR_PARAMS                                                                          \
  int64_t stride_h, int64_t stride_w, int64_t pad_top, int64_t pad_left, int64_t pad_bottom, int64_t pad_right, \
      int64_t dilation_h, int64_t dilation_w
#define RELAYCC_CONV_ATTRS {stride_h, stride_w, pad_top, pad_left, pad_bottom, pad_right, dilation_h, dilation_w}

int32_t relaycc_cblas_conv2d(DLTensor *data, DLTensor *weight, DLTensor *out, DLTensor *scratch,
                             RELAYCC_CONV_ATTR_PARAMS) {
  const conv_attrs a = RELAYCC_CONV_ATTRS;
  return conv2d_impl(data, weight, NULL, out, scratch, &a, 0);
}

int32_t relaycc_cblas_conv2d_bias(DLTensor *data, DLTensor *weight, DLTensor *bias, DLTensor *out, DLTensor *scratch,
                                  RELAYCC_CONV_ATTR_PARAMS) {
  const conv_attrs a = RELAYCC_CONV_ATTRS;
  if (bias == NULL) return RELAYCC_CBLAS_NULL_TENSOR;
  return conv2d_impl(data, weight, bias, out, scratch, &a, 0);
}

int32_t relaycc_cblas_conv2d_bias_relu(DLTensor *data, DLTensor *weight, DLTensor *bias, DLTensor *out,
                                       DLTensor *scratch, RELAYCC_CONV_ATTR_PARAMS) {
  const conv_attrs a = RELAYCC_CONV_ATTRS;
  if (bias == NULL) return RELAYCC_CBLAS_NULL_TENSOR;
  return conv2d_impl(data, weight, bias, out, scratch, &a, 1);
}
