// IncrementalDetokenizer: turns a stream of generated ids into text chunks for
// one request. A chunk is emitted only when it can no longer change: it ends on a
// complete UTF-8 character, and a run of byte-fallback tokens is held until a
// non-byte token closes it (a skipped special token does not close it). The chunks, concatenated and followed by Flush(), are
// exactly Tokenizer::Decode(all ids) — SentencePiece's dropped leading space
// included — because each step decodes a short window that starts at already
// emitted ids and emits only what the new ids add.
//
// One instance per sequence; not thread-safe. The Tokenizer must outlive it.
#ifndef TPSERVE_SERVER_TOKENIZER_INCREMENTAL_DETOKENIZER_H_
#define TPSERVE_SERVER_TOKENIZER_INCREMENTAL_DETOKENIZER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/tokenizer/tokenizer.h"

namespace tpserve {

class IncrementalDetokenizer {
 public:
  IncrementalDetokenizer(const Tokenizer* tokenizer, bool skip_special_tokens)
      : tokenizer_(*tokenizer), skip_special_tokens_(skip_special_tokens) {}

  // Adds one id; returns the text that became final (often empty). An id out of
  // range is InvalidArgument and leaves the state unchanged.
  absl::StatusOr<std::string> Step(int32_t id);

  // Ends the stream: returns whatever was held back, as Decode would render it.
  absl::StatusOr<std::string> Flush();

 private:
  // Decodes ids_[begin, end).
  absl::StatusOr<std::string> DecodeRange(size_t begin, size_t end) const;

  const Tokenizer& tokenizer_;
  const bool skip_special_tokens_;
  std::vector<int32_t> ids_;  // ids from the window start on
  size_t read_ = 0;           // ids_[0, read_) are emitted; ids_[0] starts the window
};

}  // namespace tpserve

#endif  // TPSERVE_SERVER_TOKENIZER_INCREMENTAL_DETOKENIZER_H_
