#include "base/args.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/status_macros.h"

namespace tpserve {

void ArgParser::AddString(const std::string& name, std::string* dst, const std::string& help) {
  flags_.push_back({name, Kind::kString, dst, help});
}
void ArgParser::AddInt(const std::string& name, int64_t* dst, const std::string& help) {
  flags_.push_back({name, Kind::kInt, dst, help});
}
void ArgParser::AddDouble(const std::string& name, double* dst, const std::string& help) {
  flags_.push_back({name, Kind::kDouble, dst, help});
}
void ArgParser::AddBool(const std::string& name, bool* dst, const std::string& help) {
  flags_.push_back({name, Kind::kBool, dst, help});
}
void ArgParser::AddRepeated(const std::string& name, std::vector<std::string>* dst,
                            const std::string& help) {
  flags_.push_back({name, Kind::kRepeated, dst, help});
}

ArgParser::Flag* ArgParser::Find(const std::string& name) {
  for (Flag& f : flags_) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

bool ArgParser::Seen(const std::string& name) const {
  for (const Flag& f : flags_) {
    if (f.name == name) return f.seen;
  }
  return false;
}

absl::Status ArgParser::Assign(Flag& flag, const std::string& value) {
  switch (flag.kind) {
    case Kind::kString:
      *static_cast<std::string*>(flag.dst) = value;
      break;
    case Kind::kRepeated:
      static_cast<std::vector<std::string>*>(flag.dst)->push_back(value);
      break;
    case Kind::kInt:
      if (!absl::SimpleAtoi(value, static_cast<int64_t*>(flag.dst))) {
        return absl::InvalidArgumentError(
            absl::StrCat("--", flag.name, " needs an integer, got \"", value, "\""));
      }
      break;
    case Kind::kDouble:
      if (!absl::SimpleAtod(value, static_cast<double*>(flag.dst))) {
        return absl::InvalidArgumentError(
            absl::StrCat("--", flag.name, " needs a number, got \"", value, "\""));
      }
      break;
    case Kind::kBool:
      if (value == "true" || value == "1") {
        *static_cast<bool*>(flag.dst) = true;
      } else if (value == "false" || value == "0") {
        *static_cast<bool*>(flag.dst) = false;
      } else {
        return absl::InvalidArgumentError(absl::StrCat("--", flag.name, " takes no value"));
      }
      break;
  }
  flag.seen = true;
  return absl::OkStatus();
}

absl::Status ArgParser::Parse(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") {
      for (++i; i < argc; ++i) positional_.push_back(argv[i]);
      break;
    }
    if (!absl::ConsumePrefix(&arg, "--")) {
      positional_.emplace_back(arg);
      continue;
    }
    const size_t eq = arg.find('=');
    const std::string name(arg.substr(0, eq));
    Flag* flag = Find(name);
    if (flag == nullptr) return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    if (eq != absl::string_view::npos) {
      TPSERVE_RETURN_IF_ERROR(Assign(*flag, std::string(arg.substr(eq + 1))));
    } else if (flag->kind == Kind::kBool) {
      TPSERVE_RETURN_IF_ERROR(Assign(*flag, "true"));
    } else {
      if (i + 1 >= argc) return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
      TPSERVE_RETURN_IF_ERROR(Assign(*flag, argv[++i]));
    }
  }
  return absl::OkStatus();
}

std::string ArgParser::Usage() const {
  std::string out = absl::StrCat("usage: ", program_, " [flags]\n");
  for (const Flag& f : flags_) {
    absl::StrAppend(&out, "  --", f.name, f.kind == Kind::kBool ? "" : " VALUE", "\n      ",
                    f.help, "\n");
  }
  return out;
}

absl::Status ParseIdList(const std::string& text, std::vector<int32_t>* ids) {
  ids->clear();
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int32_t id;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(part), &id)) {
      return absl::InvalidArgumentError(absl::StrCat("\"", part, "\" is not a token id"));
    }
    ids->push_back(id);
  }
  if (text.empty() || ids->empty()) return absl::InvalidArgumentError("the id list is empty");
  return absl::OkStatus();
}

}  // namespace tpserve
