// Runs ggml's reference quantizers on a raw little-endian f32 file and
// writes the blocks to stdout. Build against ggml-quants.c (see README.md):
//   ref_harness TYPE INPUT.f32 > OUTPUT.bin
#include "ggml-quants.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ggml-quants.c references these from ggml.c; the reference quantizers never call them.
void ggml_abort(const char * file, int line, const char * fmt, ...) { (void)fmt; fprintf(stderr, "abort %s:%d\n", file, line); abort(); }
size_t ggml_row_size(enum ggml_type type, int64_t ne) { (void)type; (void)ne; abort(); }
size_t ggml_type_size(enum ggml_type type) { (void)type; abort(); }
const char * ggml_type_name(enum ggml_type type) { (void)type; abort(); }

typedef void (*quant_fn)(const float *, void *, int64_t);
static const struct { const char * name; int block; int size; quant_fn f; } types[] = {
    {"Q4_0", 32, 18, (quant_fn)quantize_row_q4_0_ref},
    {"Q4_1", 32, 20, (quant_fn)quantize_row_q4_1_ref},
    {"Q5_0", 32, 22, (quant_fn)quantize_row_q5_0_ref},
    {"Q5_1", 32, 24, (quant_fn)quantize_row_q5_1_ref},
    {"Q8_0", 32, 34, (quant_fn)quantize_row_q8_0_ref},
    {"Q8_1", 32, 36, (quant_fn)quantize_row_q8_1_ref},
    {"Q2_K", 256, 84, (quant_fn)quantize_row_q2_K_ref},
    {"Q3_K", 256, 110, (quant_fn)quantize_row_q3_K_ref},
    {"Q4_K", 256, 144, (quant_fn)quantize_row_q4_K_ref},
    {"Q5_K", 256, 176, (quant_fn)quantize_row_q5_K_ref},
    {"Q6_K", 256, 210, (quant_fn)quantize_row_q6_K_ref},
    {"Q8_K", 256, 292, (quant_fn)quantize_row_q8_K_ref},
};

int main(int argc, char ** argv) {
    if (argc != 3) { fprintf(stderr, "usage: %s TYPE INPUT.f32\n", argv[0]); return 2; }
    FILE * in = fopen(argv[2], "rb");
    if (!in) { perror(argv[2]); return 1; }
    fseek(in, 0, SEEK_END); long bytes = ftell(in); fseek(in, 0, SEEK_SET);
    long n = bytes / 4;
    float * x = malloc(bytes);
    if (fread(x, 4, n, in) != (size_t)n) { perror("read"); return 1; }
    for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
        if (strcmp(types[t].name, argv[1]) != 0) continue;
        if (n % types[t].block) { fprintf(stderr, "%ld values are not whole blocks\n", n); return 1; }
        size_t out_bytes = (size_t)(n / types[t].block) * types[t].size;
        void * y = calloc(1, out_bytes);  // zeroed: Q8_K leaves bsums of all-zero blocks unwritten
        types[t].f(x, y, n);
        fwrite(y, 1, out_bytes, stdout);
        return 0;
    }
    fprintf(stderr, "unknown type %s\n", argv[1]);
    return 1;
}
