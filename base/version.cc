#include "base/version.h"

#include "absl/strings/str_cat.h"
#include "base/build_info.h"

namespace tpserve {

const char* TpserveVersion() { return "0.1.0"; }

const char* GitRevision() { return TPSERVE_GIT_REVISION; }

std::string VersionText(const std::string& program) {
#if defined(__clang__)
  const std::string compiler = absl::StrCat("clang ", __clang_version__);
#elif defined(__GNUC__)
  const std::string compiler = absl::StrCat("GCC ", __VERSION__);
#else
  const std::string compiler = "unknown compiler";
#endif
  return absl::StrCat(program, " ", TpserveVersion(), " (git ", GitRevision(), ", ",
                      TPSERVE_BUILD_MODE, " build, ", compiler, ")");
}

}  // namespace tpserve
