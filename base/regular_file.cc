#include "base/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace tpserve {
namespace {

// What a file that is not regular is instead, for the error.
const char* KindOf(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISDIR(mode)) return "a directory";
  return "not a regular file either";  // no other S_IS* exists on Linux
}

// " (-> target)" when `path` is a symlink, so the error shows what it pointed at.
std::string SymlinkTarget(const std::string& path) {
  struct stat link;
  if (::lstat(path.c_str(), &link) != 0 || !S_ISLNK(link.st_mode)) return "";
  char target[4096];
  const ssize_t n = ::readlink(path.c_str(), target, sizeof(target));
  if (n <= 0) return "";
  return absl::StrCat(" (-> ", absl::string_view(target, static_cast<size_t>(n)), ")");
}

absl::Status NotRegular(const std::string& path, mode_t mode) {
  return absl::InvalidArgumentError(
      absl::StrCat(path, SymlinkTarget(path), " is ", KindOf(mode), ", not a regular file"));
}

absl::Status OpenError(const std::string& path, int err) {
  // open() of a Unix socket fails with ENXIO; stat only words the error, it decides nothing.
  struct stat st;
  if (err == ENXIO && ::stat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) {
    return NotRegular(path, st.st_mode);
  }
  std::string message = absl::StrCat(path, ": cannot open: ", std::strerror(err));
  return err == ENOENT ? absl::NotFoundError(message) : absl::InternalError(message);
}

absl::Status OverCap(const std::string& path, uint64_t size, uint64_t max_bytes) {
  return absl::InvalidArgumentError(
      absl::StrCat(path, " is ", size, " bytes, over the cap of ", max_bytes, " bytes"));
}

}  // namespace

absl::StatusOr<RegularFile> RegularFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return OpenError(path, errno);
  RegularFile file(path, fd, 0);  // closes fd on every return below
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    return absl::InternalError(absl::StrCat(path, ": fstat failed: ", std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) return NotRegular(path, st.st_mode);
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    return absl::InternalError(
        absl::StrCat(path, ": cannot clear O_NONBLOCK: ", std::strerror(errno)));
  }
  file.size_ = static_cast<uint64_t>(st.st_size);
  return file;
}

RegularFile::RegularFile(RegularFile&& other) noexcept
    : path_(std::move(other.path_)), fd_(other.fd_), size_(other.size_) {
  other.fd_ = -1;
}

RegularFile& RegularFile::operator=(RegularFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = other.fd_;
    size_ = other.size_;
    other.fd_ = -1;
  }
  return *this;
}

RegularFile::~RegularFile() {
  if (fd_ >= 0) ::close(fd_);
}

absl::StatusOr<std::string> RegularFile::ReadAll(uint64_t max_bytes) {
  if (size_ > max_bytes) return OverCap(path_, size_, max_bytes);
  std::string text;
  text.reserve(static_cast<size_t>(size_));
  char chunk[1 << 16];
  for (;;) {
    // text.size() <= max_bytes here; one byte past the cap tells that the file is over it.
    const uint64_t room = max_bytes - text.size() + 1;
    const ssize_t n = ::read(fd_, chunk, std::min<uint64_t>(sizeof(chunk), room));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return absl::InternalError(absl::StrCat(path_, ": read failed: ", std::strerror(errno)));
    }
    if (n == 0) return text;
    text.append(chunk, static_cast<size_t>(n));
    if (text.size() > max_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat(path_, " holds more than the cap of ", max_bytes, " bytes (", size_,
                       " when opened; it grew, or does not report its size)"));
    }
  }
}

absl::StatusOr<std::string> ReadRegularFile(const std::string& path, uint64_t max_bytes) {
  TPSERVE_ASSIGN_OR_RETURN(RegularFile file, RegularFile::Open(path));
  return file.ReadAll(max_bytes);
}

}  // namespace tpserve
