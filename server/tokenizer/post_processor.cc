#include "server/tokenizer/post_processor.h"

#include <algorithm>
#include <utility>

namespace tpserve {

std::vector<int32_t> PostProcessor::Process(std::vector<int32_t> sequence) const {
  if (single_.empty()) return sequence;
  std::vector<int32_t> out;
  out.reserve(sequence.size() + 4);
  for (const Piece& piece : single_) {
    if (piece.is_sequence) {
      out.insert(out.end(), sequence.begin(), sequence.end());
    } else {
      out.insert(out.end(), piece.ids.begin(), piece.ids.end());
    }
  }
  return out;
}

int32_t PostProcessor::MaxId() const {
  int32_t max_id = -1;
  for (const Piece& piece : single_) {
    for (const int32_t id : piece.ids) max_id = std::max(max_id, id);
  }
  return max_id;
}

}  // namespace tpserve
