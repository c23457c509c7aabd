// A progress line for a terminal, as tqdm draws one: "bench  37/64 [######----]  57%
// 12.3 s", redrawn in place (carriage return) as work ends, at most every 100 ms, and
// once more with a newline when it is finished.
//
// Threading: Update from any thread; Finish once, after the last Update.
#ifndef TPSERVE_CLIENT_PROGRESS_H_
#define TPSERVE_CLIENT_PROGRESS_H_

#include <ostream>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace tpserve {

// The line for `done` of `total` after `elapsed_s`, its bar `width` cells wide.
std::string ProgressLine(absl::string_view label, int done, int total, double elapsed_s,
                         int width = 30);

class ProgressBar {
 public:
  // `out` (a terminal's stream) outlives the bar.
  ProgressBar(std::ostream& out, std::string label, int total);
  // `done` of the total have ended.
  void Update(int done);
  // Draws the last state and ends the line.
  void Finish();

 private:
  void Draw(int done) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::ostream& out_;
  const std::string label_;
  const int total_;
  const absl::Time start_;
  absl::Mutex mu_;
  int done_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time drawn_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace tpserve

#endif  // TPSERVE_CLIENT_PROGRESS_H_
