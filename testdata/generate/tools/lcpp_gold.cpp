// lcpp_gold: greedy continuations and teacher-forced top-K logits from
// llama.cpp (libllama), for Lamina's generation fidelity tests.
//
//   lcpp_gold -m MODEL (-f PROMPT_FILE | --ids-file IDS_JSON) [-n 64] [--top 5]
//             [--fa auto|on|off] [--kv f16|f32] [-t 2] [-c 2048] [--ignore-eog]
//
// -f: the prompt is tokenized as llama-cli does (add_special, parse_special),
//     run as one batch, then decoded greedily one token at a time for -n
//     tokens (stopping after an end-of-generation token, unless --ignore-eog).
// --ids-file: a gold JSON written by -f ({"prompt_ids": [...], "ids": [...]});
//     the same schedule, but the continuation is forced to its "ids"
//     (teacher forcing) instead of argmax.
// Output (stdout, one JSON object): prompt_ids, ids (the continuation),
// and "top": for each position from the last prompt token on (the
// predictions of ids[0], ids[1], ...), the top-K [id, logit] pairs.
#include "llama.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

static std::vector<int> parse_array(const std::string & s, const std::string & key) {
    std::vector<int> out;
    size_t k = s.find("\"" + key + "\"");
    if (k == std::string::npos) { fprintf(stderr, "no key %s\n", key.c_str()); exit(1); }
    size_t a = s.find('[', k), b = s.find(']', a);
    std::stringstream ss(s.substr(a + 1, b - a - 1));
    std::string tok;
    while (std::getline(ss, tok, ',')) if (!tok.empty()) out.push_back(atoi(tok.c_str()));
    return out;
}

static void top_k(const float * logits, int n_vocab, int k, std::string & out) {
    std::vector<int> idx(n_vocab);
    for (int i = 0; i < n_vocab; i++) idx[i] = i;
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int a, int b) {
        return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    out += "[";
    for (int i = 0; i < k; i++) {
        char buf[64];
        snprintf(buf, sizeof buf, "%s[%d,%.6f]", i ? "," : "", idx[i], logits[idx[i]]);
        out += buf;
    }
    out += "]";
}

int main(int argc, char ** argv) {
    std::string model_path, prompt_file, ids_file, fa = "auto", kv = "f16";
    int n_predict = 64, top = 5, threads = 2, n_ctx = 2048;
    bool ignore_eog = false;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        auto next = [&]() { if (i + 1 >= argc) { fprintf(stderr, "%s needs a value\n", a.c_str()); exit(1); } return std::string(argv[++i]); };
        if (a == "-m") model_path = next();
        else if (a == "-f") prompt_file = next();
        else if (a == "--ids-file") ids_file = next();
        else if (a == "-n") n_predict = atoi(next().c_str());
        else if (a == "--top") top = atoi(next().c_str());
        else if (a == "--fa") fa = next();
        else if (a == "--kv") kv = next();
        else if (a == "-t") threads = atoi(next().c_str());
        else if (a == "-c") n_ctx = atoi(next().c_str());
        else if (a == "--ignore-eog") ignore_eog = true;
        else { fprintf(stderr, "unknown argument %s\n", a.c_str()); return 1; }
    }
    llama_log_set([](enum ggml_log_level, const char *, void *) {}, nullptr);
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    llama_model * model = llama_model_load_from_file(model_path.c_str(), mp);
    if (!model) { fprintf(stderr, "cannot load %s\n", model_path.c_str()); return 1; }
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);

    std::vector<llama_token> prompt, forced;
    bool teacher = !ids_file.empty();
    if (teacher) {
        std::ifstream f(ids_file);
        std::stringstream ss; ss << f.rdbuf();
        for (int x : parse_array(ss.str(), "prompt_ids")) prompt.push_back(x);
        for (int x : parse_array(ss.str(), "ids")) forced.push_back(x);
        n_predict = (int) forced.size();
    } else {
        std::ifstream f(prompt_file, std::ios::binary);
        std::stringstream ss; ss << f.rdbuf();
        std::string text = ss.str();
        int n = -llama_tokenize(vocab, text.data(), text.size(), nullptr, 0, true, true);
        prompt.resize(n);
        llama_tokenize(vocab, text.data(), text.size(), prompt.data(), n, true, true);
    }

    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_threads = threads;
    cp.n_threads_batch = threads;
    cp.flash_attn_type = fa == "on" ? LLAMA_FLASH_ATTN_TYPE_ENABLED
                       : fa == "off" ? LLAMA_FLASH_ATTN_TYPE_DISABLED : LLAMA_FLASH_ATTN_TYPE_AUTO;
    cp.type_k = cp.type_v = kv == "f32" ? GGML_TYPE_F32 : GGML_TYPE_F16;
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "cannot create context\n"); return 1; }

    std::vector<llama_token> out_ids;
    std::string tops = "[";
    llama_batch batch = llama_batch_init(std::max<int>(prompt.size(), 1), 0, 1);
    auto run = [&](const llama_token * toks, int n, int pos0) {
        batch.n_tokens = n;
        for (int i = 0; i < n; i++) {
            batch.token[i] = toks[i];
            batch.pos[i] = pos0 + i;
            batch.n_seq_id[i] = 1;
            batch.seq_id[i][0] = 0;
            batch.logits[i] = i == n - 1;
        }
        if (llama_decode(ctx, batch) != 0) { fprintf(stderr, "decode failed\n"); exit(1); }
    };
    run(prompt.data(), prompt.size(), 0);
    int pos = prompt.size();
    for (int step = 0; step < n_predict; step++) {
        const float * logits = llama_get_logits_ith(ctx, -1);
        if (step) tops += ",";
        top_k(logits, n_vocab, top, tops);
        llama_token next;
        if (teacher) next = forced[step];
        else next = std::max_element(logits, logits + n_vocab) - logits;
        out_ids.push_back(next);
        if (!teacher && !ignore_eog && llama_vocab_is_eog(vocab, next)) break;
        if (step + 1 == n_predict) break;
        run(&next, 1, pos);
        pos++;
    }
    tops += "]";
    printf("{\"prompt_ids\":[");
    for (size_t i = 0; i < prompt.size(); i++) printf("%s%d", i ? "," : "", prompt[i]);
    printf("],\"ids\":[");
    for (size_t i = 0; i < out_ids.size(); i++) printf("%s%d", i ? "," : "", out_ids[i]);
    printf("],\"top\":%s}\n", tops.c_str());
    llama_batch_free(batch);
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}
