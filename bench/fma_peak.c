/* The machine's floating-point peak: every thread runs independent chains of float32 fused
 * multiply-adds on full-width vectors, enough chains to cover the FMA latency on every FMA port
 * (4-5 cycles x 2 ports needs 8-10 in flight; 12 leave headroom and still fit the registers).
 * The vector width is the widest the build machine has (__AVX512F__ under -march=native), so
 * the figure is what generated code could reach there.
 * Usage: fma_peak THREADS SECONDS; prints GFLOP/s (2 per multiply-add per lane). */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#if defined(__AVX512F__)
#define VECTOR_BYTES 64
#elif defined(__AVX__)
#define VECTOR_BYTES 32
#else
#define VECTOR_BYTES 16
#endif
#define LANES (VECTOR_BYTES / 4)
#define CHAINS 12
#define INNER 100000L

typedef float vec __attribute__((vector_size(VECTOR_BYTES)));

static double chains(long rounds, float seed, float *sink) {
    vec acc[CHAINS];
    vec mul = {0}, add = {0};
    for (int l = 0; l < LANES; l++) {
        mul[l] = 0.999999f;
        add[l] = seed * 1e-6f;
    }
    for (int c = 0; c < CHAINS; c++)
        for (int l = 0; l < LANES; l++) acc[c][l] = seed + c;
    for (long r = 0; r < rounds; r++) {
        for (long i = 0; i < INNER; i++) {
#pragma GCC unroll 12
            for (int c = 0; c < CHAINS; c++) acc[c] = acc[c] * mul + add;
        }
    }
    float total = 0;
    for (int c = 0; c < CHAINS; c++)
        for (int l = 0; l < LANES; l++) total += acc[c][l];
    *sink = total; /* keeps the chains live */
    return 2.0 * CHAINS * LANES * INNER * (double)rounds;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s THREADS SECONDS\n", argv[0]);
        return 2;
    }
    int threads = atoi(argv[1]);
    double seconds = atof(argv[2]);
    float sink = 0;
    /* Calibrate the round count on one thread so the timed run lasts about SECONDS. */
    double start = omp_get_wtime();
    chains(10, 1.0f, &sink);
    double per_round = (omp_get_wtime() - start) / 10;
    long rounds = (long)(seconds / per_round) + 1;
    double flop = 0;
    start = omp_get_wtime();
#pragma omp parallel num_threads(threads) reduction(+ : flop)
    {
        float local;
        flop += chains(rounds, 1.0f + omp_get_thread_num(), &local);
#pragma omp critical
        sink += local;
    }
    double elapsed = omp_get_wtime() - start;
    printf("%.3f %d %g\n", flop / elapsed / 1e9, VECTOR_BYTES * 8, (double)sink);
    return 0;
}
