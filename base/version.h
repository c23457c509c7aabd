// What `--version` prints for each tpserve binary.
#ifndef TPSERVE_BASE_VERSION_H_
#define TPSERVE_BASE_VERSION_H_

#include <string>

namespace tpserve {

// The release, e.g. "0.1.0".
const char* TpserveVersion();
// The git revision the binary was built from (12 hex digits), or "unknown".
const char* GitRevision();

// "tpserve 0.1.0 (git 0123456789ab, opt build, GCC 12.2.0)" for `program` "tpserve".
std::string VersionText(const std::string& program);

}  // namespace tpserve

#endif  // TPSERVE_BASE_VERSION_H_
