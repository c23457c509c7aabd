// Decoders: turn the vocabulary strings of decoded ids back into text, as Hugging
// Face's decode_chain does (ByteLevel, Metaspace, Replace, ByteFallback, Fuse,
// Strip, Sequence); the text is the chain's output joined. Built once by the
// loader, immutable, safe from many threads.
#ifndef TPSERVE_SERVER_TOKENIZER_DECODER_H_
#define TPSERVE_SERVER_TOKENIZER_DECODER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "server/tokenizer/normalizer.h"

namespace tpserve {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual absl::Status DecodeChain(std::vector<std::string>* tokens) const = 0;
  // True when a <0xNN> token may still change meaning with the tokens after it
  // (ByteFallback joins a whole run of them before checking UTF-8).
  virtual bool JoinsByteRuns() const { return false; }
};

// Maps ByteLevel-alphabet characters back to bytes and the whole chain to text.
class ByteLevelDecoder : public Decoder {
 public:
  absl::Status DecodeChain(std::vector<std::string>* tokens) const override;
};

// Turns the replacement character into spaces; drops it in the first token
// unless the scheme is "never".
class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool strip_first)
      : replacement_(std::move(replacement)), strip_first_(strip_first) {}
  absl::Status DecodeChain(std::vector<std::string>* tokens) const override;

 private:
  std::string replacement_;
  bool strip_first_;
};

class ReplaceDecoder : public Decoder {
 public:
  explicit ReplaceDecoder(std::unique_ptr<ReplaceNormalizer> replace)
      : replace_(std::move(replace)) {}
  absl::Status DecodeChain(std::vector<std::string>* tokens) const override;

 private:
  std::unique_ptr<ReplaceNormalizer> replace_;
};

// Runs of <0xNN> tokens become their bytes if valid UTF-8, else one U+FFFD each.
class ByteFallbackDecoder : public Decoder {
 public:
  absl::Status DecodeChain(std::vector<std::string>* tokens) const override;
  bool JoinsByteRuns() const override { return true; }
};

class FuseDecoder : public Decoder {
 public:
  absl::Status DecodeChain(std::vector<std::string>* tokens) const override;
};

// Removes up to `start` leading and `stop` trailing `content` characters per token.
class StripDecoder : public Decoder {
 public:
  StripDecoder(char32_t content, size_t start, size_t stop)
      : content_(content), start_(start), stop_(stop) {}
  absl::Status DecodeChain(std::vector<std::string>* tokens) const override;

 private:
  char32_t content_;
  size_t start_;
  size_t stop_;
};

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> steps)
      : steps_(std::move(steps)) {}
  absl::Status DecodeChain(std::vector<std::string>* tokens) const override;
  bool JoinsByteRuns() const override;

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

// "<0xNN>" -> NN; -1 for any other token.
int ParseByteToken(std::string_view token);

}  // namespace tpserve

#endif  // TPSERVE_SERVER_TOKENIZER_DECODER_H_
