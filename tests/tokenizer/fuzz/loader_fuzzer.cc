// libFuzzer target: arbitrary bytes as tokenizer.json. Loading must fail cleanly
// or give a tokenizer whose encode/decode never crash.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "server/tokenizer/incremental_detokenizer.h"
#include "server/tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view json(reinterpret_cast<const char*>(data), size);
  auto tokenizer = tpserve::Tokenizer::FromJson(json, json);
  if (!tokenizer.ok()) return 0;
  for (const char* text : {"ab <s> a\xc3\xa9 12\n\t", "\xff", ""}) {
    auto ids = (*tokenizer)->Encode(text, true);
    if (!ids.ok()) continue;
    (void)(*tokenizer)->Decode(*ids, true);
    tpserve::IncrementalDetokenizer detok(tokenizer->get(), false);
    for (int32_t id : *ids) (void)detok.Step(id);
    (void)detok.Flush();
  }
  std::vector<int32_t> ids;
  for (int32_t id = -1; id <= (*tokenizer)->id_bound() && id < 64; ++id) ids.push_back(id);
  (void)(*tokenizer)->Decode(ids, false);
  return 0;
}
