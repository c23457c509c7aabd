// Normalizers: the text rewrites Hugging Face runs on each piece of input before
// pre-tokenization (NFC/NFD/NFKC/NFKD, Lowercase, Prepend, Replace, Strip,
// Sequence). Built once by the loader, immutable, safe from many threads.
// Inputs and outputs are valid UTF-8.
#ifndef TPSERVE_SERVER_TOKENIZER_NORMALIZER_H_
#define TPSERVE_SERVER_TOKENIZER_NORMALIZER_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "server/tokenizer/regex.h"
#include "server/tokenizer/unicode.h"

namespace tpserve {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual absl::StatusOr<std::string> Normalize(std::string_view text) const = 0;
};

class UnicodeNormalizer : public Normalizer {
 public:
  explicit UnicodeNormalizer(NormalizationForm form) : form_(form) {}
  absl::StatusOr<std::string> Normalize(std::string_view text) const override;

 private:
  NormalizationForm form_;
};

class LowercaseNormalizer : public Normalizer {
 public:
  absl::StatusOr<std::string> Normalize(std::string_view text) const override;
};

// Prepends `prefix` to non-empty text.
class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  absl::StatusOr<std::string> Normalize(std::string_view text) const override;

 private:
  std::string prefix_;
};

// Replaces every match of a literal string or regex with `content`.
class ReplaceNormalizer : public Normalizer {
 public:
  // `regex` is null for a literal pattern.
  ReplaceNormalizer(std::string literal, std::unique_ptr<Regex> regex, std::string content)
      : literal_(std::move(literal)), regex_(std::move(regex)), content_(std::move(content)) {}
  absl::StatusOr<std::string> Normalize(std::string_view text) const override;

 private:
  std::string literal_;
  std::unique_ptr<Regex> regex_;
  std::string content_;
};

// Removes leading and/or trailing Unicode whitespace.
class StripNormalizer : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  absl::StatusOr<std::string> Normalize(std::string_view text) const override;

 private:
  bool left_;
  bool right_;
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps)
      : steps_(std::move(steps)) {}
  absl::StatusOr<std::string> Normalize(std::string_view text) const override;

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

}  // namespace tpserve

#endif  // TPSERVE_SERVER_TOKENIZER_NORMALIZER_H_
