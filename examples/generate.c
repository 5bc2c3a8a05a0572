/* generate.c: continue a prompt with a checkpoint through libimplicit's public API.
 *   cc generate.c $(pkg-config --cflags --libs implicit) -o generate
 *   ./generate CKPT "Once upon a time" [max_tokens [temperature [top_p [seed]]]]
 * Prints the same text as `implicit generate CKPT --prompt ... --echo 0` with those settings. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <implicit.h>

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: %s CKPT PROMPT [max_tokens [temperature [top_p [seed]]]]\n", argv[0]); return 2; }
    int max_tokens = argc > 3 ? atoi(argv[3]) : 64;
    float temperature = argc > 4 ? (float)atof(argv[4]) : 1.0f, top_p = argc > 5 ? (float)atof(argv[5]) : 1.0f;
    uint64_t seed = argc > 6 ? strtoull(argv[6], NULL, 10) : 0;
    im_model *m = NULL; im_tokenizer *tok = NULL; im_state *st = NULL; im_sampler *smp = NULL;
    int *ids = NULL, rc = 0;
    size_t n = 0;
    float *logits = NULL;
    im_set_threads(1);   /* one token at a time is many small kernel calls */
    if ((rc = im_model_load(&m, argv[1])) || (rc = im_model_tokenizer(&tok, m)) ||
        (rc = im_tokenizer_encode(tok, argv[2], strlen(argv[2]), &ids, &n)) || (rc = im_state_create(&st, m, 1)) ||
        (rc = im_sampler_create(&smp, im_tokenizer_vocab_size(tok), temperature, 0, top_p, seed)))
        goto done;
    if (!n) { fprintf(stderr, "error: the prompt has no tokens\n"); rc = 1; goto done; }
    if (!(logits = malloc(sizeof(float) * (size_t)im_model_vocab_size(m)))) { rc = IM_ERR_NOMEM; goto done; }
    for (size_t i = 0; i < n && !rc; i++) rc = im_state_step(st, &ids[i], logits);   /* the prompt */
    for (int g = 0; g < max_tokens && !rc; g++) {
        int id = im_sampler_next(smp, logits);
        if (id < 0) { rc = id; break; }
        if (id == im_tokenizer_eos(tok)) break;
        size_t len;
        const char *piece = im_tokenizer_piece(tok, id, &len);
        fwrite(piece, 1, len, stdout);
        if (g + 1 < max_tokens) rc = im_state_step(st, &id, logits);   /* feed it back */
    }
    printf("\n");
done:
    if (rc < 0) fprintf(stderr, "error: %s\n", im_last_error());
    free(logits); im_free(ids); im_sampler_free(smp); im_state_free(st); im_tokenizer_free(tok); im_model_free(m);
    return rc ? 1 : 0;
}
