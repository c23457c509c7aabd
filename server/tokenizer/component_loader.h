// Builds the pipeline components (normalizer, pre-tokenizer, decoder, post-
// processor) from their tokenizer.json objects. Every type or option that tpserve
// does not reproduce exactly is an error naming the field, never a silent skip.
#ifndef TPSERVE_SERVER_TOKENIZER_COMPONENT_LOADER_H_
#define TPSERVE_SERVER_TOKENIZER_COMPONENT_LOADER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/json_fields.h"
#include "server/tokenizer/decoder.h"
#include "server/tokenizer/normalizer.h"
#include "server/tokenizer/post_processor.h"
#include "server/tokenizer/pre_tokenizer.h"

namespace tpserve {

// Each takes a non-null field.
absl::StatusOr<std::unique_ptr<Normalizer>> LoadNormalizer(const JsonField& field);

// Sets *byte_level when the pipeline ends with ByteLevel (the model then sees bytes).
absl::StatusOr<std::unique_ptr<PreTokenizer>> LoadPreTokenizer(const JsonField& field,
                                                               bool* byte_level);

absl::StatusOr<std::unique_ptr<Decoder>> LoadDecoder(const JsonField& field);

// The single-sequence template (in post_processor_loader.cc).
absl::StatusOr<std::vector<PostProcessor::Piece>> LoadPostProcessor(const JsonField& field);

}  // namespace tpserve

#endif  // TPSERVE_SERVER_TOKENIZER_COMPONENT_LOADER_H_
