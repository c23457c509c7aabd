// Pre-tokenizers: split each normalized piece of input into the words that the
// model tokenizes independently, as Hugging Face does (Split, ByteLevel, Metaspace,
// Digits, WhitespaceSplit, Sequence). Built once by the loader, immutable, safe
// from many threads.
//
// ByteLevel only splits here (with the GPT-2 regex, optionally); its byte-to-
// unicode alphabet is applied by the BPE model, which works on raw bytes.
#ifndef TPSERVE_SERVER_TOKENIZER_PRE_TOKENIZER_H_
#define TPSERVE_SERVER_TOKENIZER_PRE_TOKENIZER_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "server/tokenizer/regex.h"

namespace tpserve {

// Words of a piece of input: spans [begin, end) of `text`, left to right.
struct PieceSpan {
  size_t begin;
  size_t end;
  bool at_origin;  // starts at offset 0 of the original input (Metaspace "first")
};
struct PieceList {
  std::string text;
  std::vector<PieceSpan> spans;
};

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  virtual absl::Status PreTokenize(PieceList* pieces) const = 0;
};

class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(std::unique_ptr<Regex> pattern, SplitBehavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}
  absl::Status PreTokenize(PieceList* pieces) const override;

 private:
  std::unique_ptr<Regex> pattern_;
  SplitBehavior behavior_;
  bool invert_;
};

class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  // `gpt2_regex` is null when use_regex is false.
  ByteLevelPreTokenizer(bool add_prefix_space, std::unique_ptr<Regex> gpt2_regex)
      : add_prefix_space_(add_prefix_space), gpt2_regex_(std::move(gpt2_regex)) {}
  absl::Status PreTokenize(PieceList* pieces) const override;
  static const char kGpt2Pattern[];

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> gpt2_regex_;
};

enum class PrependScheme { kAlways, kFirst, kNever };

class MetaspacePreTokenizer : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, PrependScheme scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(scheme), split_(split) {}
  absl::Status PreTokenize(PieceList* pieces) const override;

 private:
  std::string replacement_;  // one character, UTF-8
  PrependScheme scheme_;
  bool split_;
};

class DigitsPreTokenizer : public PreTokenizer {
 public:
  explicit DigitsPreTokenizer(bool individual) : individual_(individual) {}
  absl::Status PreTokenize(PieceList* pieces) const override;

 private:
  bool individual_;
};

class WhitespaceSplitPreTokenizer : public PreTokenizer {
 public:
  absl::Status PreTokenize(PieceList* pieces) const override;
};

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps)
      : steps_(std::move(steps)) {}
  absl::Status PreTokenize(PieceList* pieces) const override;

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

}  // namespace tpserve

#endif  // TPSERVE_SERVER_TOKENIZER_PRE_TOKENIZER_H_
