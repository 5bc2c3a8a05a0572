// generate.cpp: examples/generate.c in C++ — the public header is extern "C" and the handles fit
// std::unique_ptr with their free functions.
//   c++ -std=c++11 generate.cpp $(pkg-config --cflags --libs implicit) -o generate_cpp
//   ./generate_cpp CKPT "Once upon a time" [max_tokens [temperature [top_p [seed]]]]
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <implicit.h>

template <class T> using handle = std::unique_ptr<T, void (*)(T *)>;

static void ok(int rc) {
    if (rc < 0) throw std::runtime_error(im_last_error());
}

int main(int argc, char **argv) try {
    if (argc < 3) { std::fprintf(stderr, "usage: %s CKPT PROMPT [max_tokens [temperature [top_p [seed]]]]\n", argv[0]); return 2; }
    int max_tokens = argc > 3 ? std::atoi(argv[3]) : 64;
    float temperature = argc > 4 ? (float)std::atof(argv[4]) : 1.0f, top_p = argc > 5 ? (float)std::atof(argv[5]) : 1.0f;
    uint64_t seed = argc > 6 ? std::strtoull(argv[6], nullptr, 10) : 0;
    im_set_threads(1);
    im_model *mp = nullptr; im_tokenizer *tp = nullptr; im_sampler *smp = nullptr;
    ok(im_model_load(&mp, argv[1]));
    handle<im_model> model(mp, im_model_free);
    ok(im_model_tokenizer(&tp, model.get()));
    handle<im_tokenizer> tok(tp, im_tokenizer_free);
    std::string prompt(argv[2]);
    int *ids = nullptr; size_t n = 0;
    ok(im_tokenizer_encode(tok.get(), prompt.data(), prompt.size(), &ids, &n));
    std::vector<int> prompt_ids(ids, ids + n);
    im_free(ids);
    ok(im_sampler_create(&smp, im_tokenizer_vocab_size(tok.get()), temperature, 0, top_p, seed));
    handle<im_sampler> sampler(smp, im_sampler_free);
    // the text of the drawn ids, gathered by a callback (a lambda without captures is a C function)
    struct Out { const im_tokenizer *tok; std::string text; } out{tok.get(), std::string()};
    im_token_fn append = [](void *ctx, int id) {
        Out *o = static_cast<Out *>(ctx);
        size_t len = 0;
        const char *piece = im_tokenizer_piece(o->tok, id, &len);
        o->text.append(piece, len);
        return 0;
    };
    ok(im_generate(model.get(), sampler.get(), prompt_ids.data(), prompt_ids.size(), max_tokens,
                   im_tokenizer_eos(tok.get()), nullptr, nullptr, append, &out));
    std::fwrite(out.text.data(), 1, out.text.size(), stdout);
    std::putchar('\n');
    return 0;
} catch (const std::exception &e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
}
