// Hash containers keyed by std::string that look up by std::string_view (Debian's
// abseil has its own string_view, so absl's default heterogeneous lookup does not
// accept std::string_view).
#ifndef TPSERVE_SERVER_TOKENIZER_STRING_MAP_H_
#define TPSERVE_SERVER_TOKENIZER_STRING_MAP_H_

#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/hash/hash.h"
#include "absl/strings/string_view.h"

namespace tpserve {

struct StringViewHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const {
    return absl::Hash<absl::string_view>{}(absl::string_view(s.data(), s.size()));
  }
};

struct StringViewEq {
  using is_transparent = void;
  bool operator()(std::string_view a, std::string_view b) const { return a == b; }
};

template <typename V>
using StringMap = absl::flat_hash_map<std::string, V, StringViewHash, StringViewEq>;
using StringSet = absl::flat_hash_set<std::string, StringViewHash, StringViewEq>;

// For absl::StrCat and friends.
inline absl::string_view AbslView(std::string_view s) {
  return absl::string_view(s.data(), s.size());
}

}  // namespace tpserve

#endif  // TPSERVE_SERVER_TOKENIZER_STRING_MAP_H_
