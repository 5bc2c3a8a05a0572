/* generate.c: continue a prompt with a checkpoint through libimplicit's public API.
 *   cc generate.c $(pkg-config --cflags --libs implicit) -o generate
 *   ./generate CKPT "Once upon a time" [max_tokens [temperature [top_p [seed]]]]
 * Prints the same text as `implicit generate CKPT --prompt ... --echo 0` with those settings. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <implicit.h>

static int print_piece(void *tok, int id) {   /* each id's bytes as soon as it is drawn */
    size_t len;
    const char *piece = im_tokenizer_piece(tok, id, &len);
    fwrite(piece, 1, len, stdout);
    return fflush(stdout);
}

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: %s CKPT PROMPT [max_tokens [temperature [top_p [seed]]]]\n", argv[0]); return 2; }
    int max_tokens = argc > 3 ? atoi(argv[3]) : 64;
    float temperature = argc > 4 ? (float)atof(argv[4]) : 1.0f, top_p = argc > 5 ? (float)atof(argv[5]) : 1.0f;
    uint64_t seed = argc > 6 ? strtoull(argv[6], NULL, 10) : 0;
    im_model *m = NULL; im_tokenizer *tok = NULL; im_sampler *smp = NULL;
    int *ids = NULL, rc = 0;
    size_t n = 0;
    im_set_threads(1);   /* one token at a time is many small kernel calls */
    if ((rc = im_model_load(&m, argv[1])) || (rc = im_model_tokenizer(&tok, m)) ||
        (rc = im_tokenizer_encode(tok, argv[2], strlen(argv[2]), &ids, &n)) ||
        (rc = im_sampler_create(&smp, im_tokenizer_vocab_size(tok), temperature, 0, top_p, seed)) ||
        (rc = im_generate(m, smp, ids, n, max_tokens, im_tokenizer_eos(tok), NULL, NULL, print_piece, tok)))
        fprintf(stderr, "error: %s\n", im_last_error());
    else
        printf("\n");
    im_free(ids); im_sampler_free(smp); im_tokenizer_free(tok); im_model_free(m);
    return rc ? 1 : 0;
}
