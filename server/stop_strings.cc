#include "server/stop_strings.h"

#include <algorithm>
#include <utility>

namespace tpserve {

StopStringFilter::StopStringFilter(std::vector<std::string> stops) {
  for (std::string& stop : stops) {
    if (!stop.empty()) stops_.push_back(std::move(stop));
  }
}

std::string StopStringFilter::Push(std::string_view text) {
  if (stopped_) return "";
  pending_.append(text);
  // Released text never ends in a stop string's prefix, so a match lies in pending_.
  size_t first_match = std::string::npos;
  for (const std::string& stop : stops_) {
    first_match = std::min(first_match, pending_.find(stop));
  }
  if (first_match != std::string::npos) {
    stopped_ = true;
    std::string released = pending_.substr(0, first_match);
    pending_.clear();
    return released;
  }
  const size_t release = pending_.size() - HeldBackLength();
  std::string released = pending_.substr(0, release);
  pending_.erase(0, release);
  return released;
}

std::string StopStringFilter::Flush() {
  if (stopped_) return "";
  return std::exchange(pending_, std::string());
}

size_t StopStringFilter::HeldBackLength() const {
  size_t longest = 0;
  for (const std::string& stop : stops_) {
    const size_t max_len = std::min(pending_.size(), stop.size() - 1);
    for (size_t len = max_len; len > longest; --len) {
      if (std::string_view(pending_).substr(pending_.size() - len) ==
          std::string_view(stop).substr(0, len)) {
        longest = len;
        break;
      }
    }
  }
  return longest;
}

}  // namespace tpserve
