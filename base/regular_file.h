// RegularFile: a file opened for reading only once the opened descriptor has proved to
// be a regular file. Everything tpserve reads from a model directory (config.json,
// tokenizer.json, the safetensors files and their index) opens through it: a FIFO there
// would block start-up in open() or read() before the port opens, and a symlink to
// /dev/zero would be read until memory runs out.
//
// Symlinks are followed (the Hugging Face hub cache links each snapshot's files to
// blobs/). Open uses O_RDONLY|O_NONBLOCK|O_NOCTTY|O_CLOEXEC, so opening a FIFO returns at
// once instead of waiting for a writer; the check is fstat on that descriptor, so
// nothing can swap the file between a check and the open; then O_NONBLOCK is cleared
// for reading. Move-only; the destructor closes the descriptor. Any thread; one object
// is used by one thread at a time.
#ifndef TPSERVE_BASE_REGULAR_FILE_H_
#define TPSERVE_BASE_REGULAR_FILE_H_

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/statusor.h"

namespace tpserve {

class RegularFile {
 public:
  // NotFound when `path` does not exist. InvalidArgument when it is not a regular file
  // after following symlinks, naming the path and what it is instead: "x.json is a FIFO,
  // not a regular file" (a character device, block device, socket or directory
  // likewise; a symlink's target is named too). Internal for any other open failure.
  static absl::StatusOr<RegularFile> Open(const std::string& path);

  RegularFile(RegularFile&& other) noexcept;
  RegularFile& operator=(RegularFile&& other) noexcept;
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;
  ~RegularFile();

  const std::string& path() const { return path_; }
  int fd() const { return fd_; }           // blocking, close-on-exec; owned by this object
  uint64_t size() const { return size_; }  // st_size when opened

  // The rest of the file from the current offset (all of it after Open).
  // InvalidArgument naming the file, its size and the cap when size() is over
  // `max_bytes`, or when more than `max_bytes` come out of it anyway (the file grew, or
  // reports no size, as /proc files do): reading stops at the cap either way.
  absl::StatusOr<std::string> ReadAll(uint64_t max_bytes);

 private:
  RegularFile(std::string path, int fd, uint64_t size)
      : path_(std::move(path)), fd_(fd), size_(size) {}

  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// RegularFile::Open(path), then ReadAll(max_bytes).
absl::StatusOr<std::string> ReadRegularFile(const std::string& path, uint64_t max_bytes);

}  // namespace tpserve

#endif  // TPSERVE_BASE_REGULAR_FILE_H_
