// chat_gold: chat templates rendered by llama.cpp's own Jinja engine and chat
// layer (common_chat_templates_init / common_chat_templates_apply), for
// Lamina's chat template tests.
//
//   chat_gold TEMPLATE_FILE CASES_JSON (--vocab VOCAB_GGUF | --bos TEXT --eos TEXT)
//
// --vocab loads a vocabulary-only model, so BOS/EOS texts and add_bos/add_eos
// come from it exactly as `llama-server` derives them; otherwise the given
// texts are used with add_bos = add_eos = false (llama.cpp's no-model path).
// CASES_JSON: [{"name", "messages": [{"role", "content"}], "add_generation_prompt"}].
// A case may also give "tools" (OpenAI's function objects), "tool_choice"
// ("auto" or "required"), "parallel_tool_calls", messages with "tool_calls",
// "tool_call_id" and "name", and "outputs": {TEMPLATE_PREFIX: [reply text]},
// replies that llama.cpp's parser for the rendered prompt then splits into
// content and tool calls.
// Output (stdout, one JSON object): bos_token, eos_token, add_bos, add_eos
// and for each case its rendered "prompt" (or "error") and parsed "replies".
// The clock that `strftime_now` reads is fixed (see time() below), and TZ
// should be UTC, so dated templates render reproducibly.
#include "chat.h"
#include "common.h"
#include "llama.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstring>
#include <ctime>
#include <sys/syscall.h>
#include <unistd.h>
#include <fstream>
#include <sstream>
#include <string>

using json = nlohmann::ordered_json;

// 2025-03-14 09:30:00 UTC (not the "26 Jul 2024" Llama 3.1 prints by default,
// so the test sees whether `date_string` is passed). llama.cpp's strftime_now
// reads std::time(nullptr) and its `date_string`/`datetime` variables
// std::chrono::system_clock::now() (clock_gettime); defining both here
// interposes the C library's.
static const time_t FIXED_TIME = 1741944600;
extern "C" time_t time(time_t * t) {
    if (t) {
        *t = FIXED_TIME;
    }
    return FIXED_TIME;
}
extern "C" int clock_gettime(clockid_t clk, struct timespec * ts) {
    if (clk == CLOCK_REALTIME) {
        ts->tv_sec = FIXED_TIME;
        ts->tv_nsec = 0;
        return 0;
    }
    return (int) syscall(SYS_clock_gettime, clk, ts);
}

static std::string slurp(const char * path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) {
        fprintf(stderr, "cannot read %s\n", path);
        exit(1);
    }
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

static common_chat_msg read_msg(const json & m) {
    common_chat_msg msg;
    msg.role = m.at("role").get<std::string>();
    msg.content = m.value("content", "");
    if (m.contains("tool_calls")) {
        for (const auto & c : m.at("tool_calls")) {
            common_chat_tool_call call;
            call.id = c.value("id", "");
            call.name = c.at("function").at("name").get<std::string>();
            call.arguments = c.at("function").at("arguments").get<std::string>();
            msg.tool_calls.push_back(call);
        }
    }
    msg.tool_call_id = m.value("tool_call_id", "");
    msg.tool_name = m.value("name", "");
    return msg;
}

int main(int argc, char ** argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s TEMPLATE CASES_JSON (--vocab GGUF | --bos TEXT --eos TEXT)\n", argv[0]);
        return 1;
    }
    std::string tmpl_src = slurp(argv[1]);
    json cases = json::parse(slurp(argv[2]));
    std::string vocab_path, bos, eos;
    for (int i = 3; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--vocab")) vocab_path = argv[i + 1];
        else if (!strcmp(argv[i], "--bos")) bos = argv[i + 1];
        else if (!strcmp(argv[i], "--eos")) eos = argv[i + 1];
        else { fprintf(stderr, "unknown flag %s\n", argv[i]); return 1; }
    }
    llama_log_set([](ggml_log_level, const char *, void *) {}, nullptr);
    llama_backend_init();
    llama_model * model = nullptr;
    if (!vocab_path.empty()) {
        auto mp = llama_model_default_params();
        mp.vocab_only = true;
        model = llama_model_load_from_file(vocab_path.c_str(), mp);
        if (!model) {
            fprintf(stderr, "cannot load %s\n", vocab_path.c_str());
            return 1;
        }
        const llama_vocab * vocab = llama_model_get_vocab(model);
        auto piece = [&](llama_token t) {
            return t == LLAMA_TOKEN_NULL ? std::string() : common_token_to_piece(vocab, t, true);
        };
        bos = piece(llama_vocab_bos(vocab));
        eos = piece(llama_vocab_eos(vocab));
    }
    auto tmpls = common_chat_templates_init(model, tmpl_src, bos, eos);
    json out = {
        {"bos_token", bos},
        {"eos_token", eos},
        {"add_bos", model ? llama_vocab_get_add_bos(llama_model_get_vocab(model)) : false},
        {"add_eos", model ? llama_vocab_get_add_eos(llama_model_get_vocab(model)) : false},
        {"cases", json::array()},
    };
    for (const auto & c : cases) {
        common_chat_templates_inputs in;
        for (const auto & m : c.at("messages")) {
            in.messages.push_back(read_msg(m));
        }
        if (c.contains("tools")) {
            for (const auto & t : c.at("tools")) {
                const auto & f = t.at("function");
                in.tools.push_back({f.at("name").get<std::string>(), f.value("description", ""),
                                    f.at("parameters").dump()});
            }
            in.tool_choice = c.value("tool_choice", "auto") == "required" ? COMMON_CHAT_TOOL_CHOICE_REQUIRED
                                                                         : COMMON_CHAT_TOOL_CHOICE_AUTO;
            in.parallel_tool_calls = c.value("parallel_tool_calls", false);
        }
        in.add_generation_prompt = c.at("add_generation_prompt").get<bool>();
        in.use_jinja = true;
        json r = {{"name", c.at("name")}, {"add_generation_prompt", in.add_generation_prompt}};
        try {
            auto params = common_chat_templates_apply(tmpls.get(), in);
            r["prompt"] = params.prompt;
            std::string tmpl_name = argv[1];
            json replies = json::array();
            json outputs = c.value("outputs", json::object());
            for (auto it = outputs.begin(); it != outputs.end(); ++it) {
                const std::string prefix = it.key();
                const json & texts = it.value();
                if (tmpl_name.find("/" + prefix) == std::string::npos) {
                    continue;
                }
                common_chat_parser_params pp(params);
                pp.parser.load(params.parser);
                for (const auto & text : texts) {
                    auto msg = common_chat_parse(text.get<std::string>(), false, pp);
                    json calls = json::array();
                    for (const auto & tc : msg.tool_calls) {
                        calls.push_back({{"name", tc.name}, {"arguments", tc.arguments}});
                    }
                    replies.push_back({{"text", text}, {"content", msg.content}, {"tool_calls", calls}});
                }
            }
            if (!replies.empty()) {
                r["replies"] = replies;
            }
        } catch (const std::exception & e) {
            r["error"] = e.what();
        }
        out["cases"].push_back(r);
    }
    printf("%s\n", out.dump(1).c_str());
    if (model) {
        llama_model_free(model);
    }
    return 0;
}
