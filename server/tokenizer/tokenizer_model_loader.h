// Loads tokenizer.json's "model" (BPE only) and "added_tokens", giving added
// tokens the ids Hugging Face tokenizers gives them on load.
#ifndef TPSERVE_SERVER_TOKENIZER_TOKENIZER_MODEL_LOADER_H_
#define TPSERVE_SERVER_TOKENIZER_TOKENIZER_MODEL_LOADER_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "base/json_fields.h"
#include "server/tokenizer/added_vocabulary.h"
#include "server/tokenizer/bpe_model.h"

namespace tpserve {

// `byte_level`: the pre-tokenizer ends with ByteLevel.
absl::StatusOr<std::unique_ptr<BpeModel>> LoadBpeModel(const JsonField& field, bool byte_level);

// Errors when a listed id differs from the one HF assigns, so ids never differ.
absl::StatusOr<std::vector<AddedToken>> LoadAddedTokens(const JsonField& field,
                                                        const BpeModel& model);

}  // namespace tpserve

#endif  // TPSERVE_SERVER_TOKENIZER_TOKENIZER_MODEL_LOADER_H_
