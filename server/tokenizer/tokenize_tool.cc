// tokenize_tool: offline encode/decode with a tokenizer.json, JSON Lines in and out.
//
//   tokenize_tool --tokenizer PATH (--encode|--decode)
//                 [--add-special-tokens] [--skip-special-tokens]
//
// PATH is a tokenizer.json or its model directory. --encode reads a JSON string
// per line and writes a JSON array of ids; --decode reads an array of ids and
// writes a JSON string. A bad line gives {"error": "..."} on its output line and
// the tool goes on. Exit status 2 for bad flags, 1 when the tokenizer does not load.
#include <cstdio>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/tokenizer/tokenizer.h"

namespace tpserve {
namespace {

struct ToolOptions {
  std::string tokenizer_path;
  bool encode = false;
  bool decode = false;
  bool add_special_tokens = false;
  bool skip_special_tokens = false;
};

constexpr char kUsage[] =
    "usage: tokenize_tool --tokenizer PATH (--encode|--decode) "
    "[--add-special-tokens] [--skip-special-tokens]\n";

bool ParseArgs(int argc, char** argv, ToolOptions* options) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--tokenizer" && i + 1 < argc) {
      options->tokenizer_path = argv[++i];
    } else if (arg.substr(0, 12) == "--tokenizer=") {
      options->tokenizer_path = std::string(arg.substr(12));
    } else if (arg == "--encode") {
      options->encode = true;
    } else if (arg == "--decode") {
      options->decode = true;
    } else if (arg == "--add-special-tokens" || arg == "--add_special_tokens") {
      options->add_special_tokens = true;
    } else if (arg == "--skip-special-tokens" || arg == "--skip_special_tokens") {
      options->skip_special_tokens = true;
    } else {
      std::cerr << "unknown argument: " << arg << "\n";
      return false;
    }
  }
  return !options->tokenizer_path.empty() && options->encode != options->decode;
}

nlohmann::json Error(std::string_view message) {
  return nlohmann::json{{"error", std::string(message)}};
}

nlohmann::json EncodeLine(const Tokenizer& tokenizer, const nlohmann::json& input,
                          const ToolOptions& options) {
  if (!input.is_string()) return Error("expected a JSON string");
  auto ids = tokenizer.Encode(input.get_ref<const std::string&>(), options.add_special_tokens);
  if (!ids.ok()) return Error(std::string(ids.status().message()));
  return *ids;
}

nlohmann::json DecodeLine(const Tokenizer& tokenizer, const nlohmann::json& input,
                          const ToolOptions& options) {
  if (!input.is_array()) return Error("expected a JSON array of token ids");
  std::vector<int32_t> ids;
  ids.reserve(input.size());
  for (const nlohmann::json& id : input) {
    if (!id.is_number_integer() || id.get<int64_t>() < INT32_MIN || id.get<int64_t>() > INT32_MAX) {
      return Error("expected integer token ids");
    }
    ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  auto text = tokenizer.Decode(ids, options.skip_special_tokens);
  if (!text.ok()) return Error(std::string(text.status().message()));
  return *text;
}

int Run(const ToolOptions& options) {
  auto tokenizer = Tokenizer::FromPath(options.tokenizer_path);
  if (!tokenizer.ok()) {
    std::cerr << "tokenize_tool: " << tokenizer.status().message() << "\n";
    return 1;
  }
  std::ios::sync_with_stdio(false);
  for (std::string line; std::getline(std::cin, line);) {
    const nlohmann::json input = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    nlohmann::json output;
    if (input.is_discarded()) {
      output = Error("line is not valid JSON");
    } else if (options.encode) {
      output = EncodeLine(**tokenizer, input, options);
    } else {
      output = DecodeLine(**tokenizer, input, options);
    }
    std::cout << output.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n'
              << std::flush;
  }
  return 0;
}

}  // namespace
}  // namespace tpserve

int main(int argc, char** argv) {
  tpserve::ToolOptions options;
  if (!tpserve::ParseArgs(argc, argv, &options)) {
    std::cerr << tpserve::kUsage;
    return 2;
  }
  return tpserve::Run(options);
}
