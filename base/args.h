// ArgParser: command-line flags in the `--name value` / `--name=value` style that the
// tpserve tools document (dashes in names, as in `--token-ids`).
//
// Register destinations, then Parse(). Unknown flags, missing values and malformed
// numbers are InvalidArgument naming the flag; positional arguments are collected.
// Used from main() only.
#ifndef TPSERVE_BASE_ARGS_H_
#define TPSERVE_BASE_ARGS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace tpserve {

class ArgParser {
 public:
  explicit ArgParser(std::string program) : program_(std::move(program)) {}

  void AddString(const std::string& name, std::string* dst, const std::string& help);
  void AddInt(const std::string& name, int64_t* dst, const std::string& help);
  void AddDouble(const std::string& name, double* dst, const std::string& help);
  // A bool flag takes no value: present means true.
  void AddBool(const std::string& name, bool* dst, const std::string& help);
  // A repeatable string flag; each occurrence appends.
  void AddRepeated(const std::string& name, std::vector<std::string>* dst,
                   const std::string& help);

  absl::Status Parse(int argc, char** argv);
  // Whether `name` appeared on the command line.
  bool Seen(const std::string& name) const;
  const std::vector<std::string>& positional() const { return positional_; }
  std::string Usage() const;

 private:
  enum class Kind { kString, kInt, kDouble, kBool, kRepeated };
  struct Flag {
    std::string name;
    Kind kind;
    void* dst;
    std::string help;
    bool seen = false;
  };
  Flag* Find(const std::string& name);
  absl::Status Assign(Flag& flag, const std::string& value);

  std::string program_;
  std::vector<Flag> flags_;
  std::vector<std::string> positional_;
};

// "1,2,3" -> {1, 2, 3}. InvalidArgument on an empty list or a non-integer element.
absl::Status ParseIdList(const std::string& text, std::vector<int32_t>* ids);

}  // namespace tpserve

#endif  // TPSERVE_BASE_ARGS_H_
