// StopStringFilter: the text side of stop strings for one sequence.
//
// Decoded text is pushed in as it becomes final; the filter releases the part that can
// be streamed. Text that could be the start of a stop string is held back until the
// next pushes show it is not; once a stop string appears, everything from its first
// byte on is discarded and the filter is stopped. So the released text never contains
// a stop string nor anything after one, and released pieces concatenate to the final
// text. Cuts fall on character boundaries when the input and the stop strings are
// valid UTF-8 (a held-back suffix starts where a stop string starts).
//
// One instance per sequence; not thread-safe.
#ifndef TPSERVE_SERVER_STOP_STRINGS_H_
#define TPSERVE_SERVER_STOP_STRINGS_H_

#include <string>
#include <string_view>
#include <vector>

namespace tpserve {

class StopStringFilter {
 public:
  // Empty stop strings are ignored.
  explicit StopStringFilter(std::vector<std::string> stops);

  // Adds text; returns what can be released now. After a stop, releases nothing.
  std::string Push(std::string_view text);
  // The stream ended without a stop: releases whatever was held back.
  std::string Flush();

  bool stopped() const { return stopped_; }

 private:
  // Length of the longest suffix of pending_ that is a proper prefix of a stop string.
  size_t HeldBackLength() const;

  std::vector<std::string> stops_;
  std::string pending_;  // pushed, not yet released; never contains a whole stop string
  bool stopped_ = false;
};

}  // namespace tpserve

#endif  // TPSERVE_SERVER_STOP_STRINGS_H_
