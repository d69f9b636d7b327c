/* memcpy against a vector loop, by the misalignment of the destination against the
 * source (rma_backend::copy_bytes' reason): 64 copies of SIZE bytes from a shared
 * mapping (as a window) into a private buffer whose blocks start SKEW bytes past the
 * source's alignment; best of 200 rounds, MB/s (10^6 bytes). x86-64 with AVX2.
 *
 *   gcc -O2 -mavx2 -o copy_alignment benches/scripts/copy_alignment.c && ./copy_alignment
 *
 * On this project's AMD EPYC guest (glibc 2.36): memcpy 1.3-2.7 GB/s from 4 KiB to
 * 64 KiB at skews 8 and 16, 22-35 GB/s at skews 0 and 64; the loop 22-25 GB/s at all
 * four (6-8 GB/s for both from 256 KiB, out of the caches). */
#define _GNU_SOURCE
#include <immintrin.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* Unaligned loads, 32-byte stores; head and tail as unaligned moves (len >= 64). */
static void vector_copy(char *d, const char *s, size_t n) {
    __m256i head = _mm256_loadu_si256((const void *)s);
    __m256i tail = _mm256_loadu_si256((const void *)(s + n - 32));
    size_t i = 32 - ((size_t)d & 31);
    for (; i + 128 <= n; i += 128) {
        __m256i a = _mm256_loadu_si256((const void *)(s + i));
        __m256i b = _mm256_loadu_si256((const void *)(s + i + 32));
        __m256i c = _mm256_loadu_si256((const void *)(s + i + 64));
        __m256i e = _mm256_loadu_si256((const void *)(s + i + 96));
        _mm256_store_si256((void *)(d + i), a);
        _mm256_store_si256((void *)(d + i + 32), b);
        _mm256_store_si256((void *)(d + i + 64), c);
        _mm256_store_si256((void *)(d + i + 96), e);
    }
    for (; i + 32 <= n; i += 32)
        _mm256_store_si256((void *)(d + i), _mm256_loadu_si256((const void *)(s + i)));
    _mm256_storeu_si256((void *)d, head);
    _mm256_storeu_si256((void *)(d + n - 32), tail);
}

int main(void) {
    const size_t most = (size_t)64 << 20, per = 64;
    char *src = mmap(0, most + 8192, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    char *dst = mmap(0, most + 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (src == MAP_FAILED || dst == MAP_FAILED) return 1;
    memset(src, 1, most + 8192);
    memset(dst, 2, most + 8192);
    printf("%-8s %5s %12s %12s\n", "size", "skew", "memcpy", "vector loop");
    for (size_t n = 4096; n <= ((size_t)1 << 20); n *= 4) {
        size_t skews[] = {0, 8, 16, 64};
        for (int k = 0; k < 4; k++) {
            double best[2] = {1e9, 1e9};
            for (int loop = 0; loop < 2; loop++) {
                for (int r = 0; r < 200; r++) {
                    double t0 = now();
                    for (size_t j = 0; j < per; j++) {
                        char *to = dst + skews[k] + j * n;
                        if (loop)
                            vector_copy(to, src + j * n, n);
                        else
                            memcpy(to, src + j * n, n);
                    }
                    double t = now() - t0;
                    if (t < best[loop]) best[loop] = t;
                }
            }
            printf("%-8zu %5zu %12.0f %12.0f\n", n, skews[k], per * n / best[0] / 1e6,
                   per * n / best[1] / 1e6);
        }
    }
    return 0;
}
