#include "client/progress.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"

namespace tpserve {

std::string ProgressLine(absl::string_view label, int done, int total, double elapsed_s,
                         int width) {
  const double fraction = total > 0 ? std::clamp(static_cast<double>(done) / total, 0.0, 1.0) : 1.0;
  const int filled = static_cast<int>(fraction * width);
  const int digits = static_cast<int>(std::to_string(std::max(total, 0)).size());
  return absl::StrFormat("%s %*d/%d [%s%s] %3d%% %.1f s", label, digits, done, total,
                         std::string(filled, '#'), std::string(width - filled, '-'),
                         static_cast<int>(fraction * 100), elapsed_s);
}

ProgressBar::ProgressBar(std::ostream& out, std::string label, int total)
    : out_(out), label_(std::move(label)), total_(total), start_(absl::Now()) {}

void ProgressBar::Update(int done) {
  absl::MutexLock lock(&mu_);
  done_ = std::max(done_, done);
  if (absl::Now() - drawn_ < absl::Milliseconds(100) && done_ < total_) return;
  Draw(done_);
}

void ProgressBar::Finish() {
  absl::MutexLock lock(&mu_);
  Draw(done_);
  out_ << "\n" << std::flush;
}

void ProgressBar::Draw(int done) {
  drawn_ = absl::Now();
  out_ << "\r" << ProgressLine(label_, done, total_, absl::ToDoubleSeconds(drawn_ - start_))
       << std::flush;
}

}  // namespace tpserve
