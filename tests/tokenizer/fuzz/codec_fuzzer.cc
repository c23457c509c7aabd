// libFuzzer target: encode and decode with the committed real tokenizers.
// Byte 0 picks the tokenizer; the rest is text to encode (often invalid UTF-8)
// and, read as little-endian 16-bit values, ids to decode and stream. Checks that
// the incremental detokenizer's output equals Decode, and decode(encode(text))
// round-trips for byte-level tokenizers.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "server/tokenizer/incremental_detokenizer.h"
#include "server/tokenizer/tokenizer.h"

namespace {

const char* const kNames[] = {"llama3", "mistral", "mistral3", "gpt2"};

const std::vector<std::unique_ptr<tpserve::Tokenizer>>& Tokenizers() {
  static auto* tokenizers = [] {
    auto* list = new std::vector<std::unique_ptr<tpserve::Tokenizer>>();
    const char* dir = std::getenv("TOKENIZER_DATA");
    for (const char* name : kNames) {
      auto t = tpserve::Tokenizer::FromPath(std::string(dir ? dir : "tests/tokenizer/data") +
                                            "/" + name);
      if (!t.ok()) abort();
      list->push_back(*std::move(t));
    }
    return list;
  }();
  return *tokenizers;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const auto& tokenizers = Tokenizers();
  const tpserve::Tokenizer& tok = *tokenizers[data[0] % tokenizers.size()];
  const bool byte_level = data[0] % tokenizers.size() == 0 || data[0] % tokenizers.size() == 3;
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);

  auto ids = tok.Encode(text, (data[0] & 0x80) != 0);
  if (ids.ok() && byte_level && (data[0] & 0x80) == 0) {
    auto round_trip = tok.Decode(*ids, false);
    if (!round_trip.ok() || *round_trip != text) abort();
  }

  std::vector<int32_t> raw;
  for (size_t i = 1; i + 1 < size; i += 2) {
    raw.push_back(static_cast<int32_t>(data[i] | (data[i + 1] << 8)) % (tok.id_bound() + 8));
  }
  for (bool skip : {false, true}) {
    auto whole = tok.Decode(raw, skip);
    tpserve::IncrementalDetokenizer detok(&tok, skip);
    std::string streamed;
    bool all_ok = true;
    for (int32_t id : raw) {
      auto chunk = detok.Step(id);
      if (chunk.ok()) streamed += *chunk;
      all_ok &= chunk.ok();
    }
    auto rest = detok.Flush();
    if (!rest.ok()) abort();
    if (whole.ok() != all_ok) abort();
    if (whole.ok() && streamed + *rest != *whole) abort();
  }
  return 0;
}
