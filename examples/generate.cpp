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
    im_model *mp = nullptr; im_tokenizer *tp = nullptr; im_state *sp = nullptr; im_sampler *smp = nullptr;
    ok(im_model_load(&mp, argv[1]));
    handle<im_model> model(mp, im_model_free);
    ok(im_model_tokenizer(&tp, model.get()));
    handle<im_tokenizer> tok(tp, im_tokenizer_free);
    std::string prompt(argv[2]);
    int *ids = nullptr; size_t n = 0;
    ok(im_tokenizer_encode(tok.get(), prompt.data(), prompt.size(), &ids, &n));
    std::vector<int> prompt_ids(ids, ids + n);
    im_free(ids);
    if (prompt_ids.empty()) throw std::runtime_error("the prompt has no tokens");
    ok(im_state_create(&sp, model.get(), 1));
    handle<im_state> state(sp, im_state_free);
    ok(im_sampler_create(&smp, im_tokenizer_vocab_size(tok.get()), temperature, 0, top_p, seed));
    handle<im_sampler> sampler(smp, im_sampler_free);
    std::vector<float> logits((size_t)im_model_vocab_size(model.get()));
    for (int id : prompt_ids) ok(im_state_step(state.get(), &id, logits.data()));
    std::string text;
    for (int g = 0; g < max_tokens; g++) {
        int id = im_sampler_next(sampler.get(), logits.data());
        ok(id);
        if (id == im_tokenizer_eos(tok.get())) break;
        size_t len = 0;
        const char *piece = im_tokenizer_piece(tok.get(), id, &len);
        text.append(piece, len);
        if (g + 1 < max_tokens) ok(im_state_step(state.get(), &id, logits.data()));
    }
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::putchar('\n');
    return 0;
} catch (const std::exception &e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
}
