// tokenizer_benchmark: single-threaded encode and decode throughput of one
// tokenizer on a JSON Lines file of documents (one JSON string per line), each
// document encoded and decoded as one request. Prints one JSON object:
//   {"bytes": N, "tokens": N, "encode_mb_s": x, "decode_mb_s": y}
// MB/s counts UTF-8 bytes of text (input for encode, output for decode).
//
//   tokenizer_benchmark --tokenizer PATH --docs FILE [--rounds N]
#include <chrono>
#include <fstream>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/tokenizer/tokenizer.h"

namespace tpserve {
namespace {

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int Run(const std::string& tokenizer_path, const std::string& docs_path, int rounds) {
  auto tokenizer = Tokenizer::FromPath(tokenizer_path);
  if (!tokenizer.ok()) {
    std::cerr << tokenizer.status().message() << "\n";
    return 1;
  }
  std::vector<std::string> docs;
  std::ifstream in(docs_path);
  for (std::string line; std::getline(in, line);) docs.push_back(nlohmann::json::parse(line));
  size_t bytes = 0;
  for (const std::string& doc : docs) bytes += doc.size();

  std::vector<std::vector<int32_t>> ids(docs.size());
  double encode_s = 1e30, decode_s = 1e30;
  size_t tokens = 0, decoded_bytes = 0;
  for (int round = 0; round < rounds; ++round) {  // best of `rounds`
    auto start = std::chrono::steady_clock::now();
    for (size_t i = 0; i < docs.size(); ++i) {
      auto encoded = (*tokenizer)->Encode(docs[i], false);
      if (!encoded.ok()) {
        std::cerr << "document " << i << ": " << encoded.status().message() << "\n";
        return 1;
      }
      ids[i] = *std::move(encoded);
    }
    encode_s = std::min(encode_s, Seconds(start));
    start = std::chrono::steady_clock::now();
    decoded_bytes = 0;
    for (const auto& doc_ids : ids) {
      auto text = (*tokenizer)->Decode(doc_ids, false);
      if (!text.ok()) {
        std::cerr << text.status().message() << "\n";
        return 1;
      }
      decoded_bytes += text->size();
    }
    decode_s = std::min(decode_s, Seconds(start));
  }
  for (const auto& doc_ids : ids) tokens += doc_ids.size();
  std::cout << nlohmann::json{{"bytes", bytes},
                              {"tokens", tokens},
                              {"encode_mb_s", bytes / encode_s / 1e6},
                              {"decode_mb_s", decoded_bytes / decode_s / 1e6}}
                   .dump()
            << "\n";
  return 0;
}

}  // namespace
}  // namespace tpserve

int main(int argc, char** argv) {
  std::string tokenizer, docs;
  int rounds = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string_view flag = argv[i];
    if (flag == "--tokenizer") tokenizer = argv[i + 1];
    if (flag == "--docs") docs = argv[i + 1];
    if (flag == "--rounds") rounds = std::stoi(argv[i + 1]);
  }
  if (tokenizer.empty() || docs.empty() || rounds < 1) {
    std::cerr << "usage: tokenizer_benchmark --tokenizer PATH --docs FILE [--rounds N]\n";
    return 2;
  }
  return tpserve::Run(tokenizer, docs, rounds);
}
