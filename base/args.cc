#include "base/args.h"

#include <cstdlib>
#include <iostream>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/status_macros.h"

namespace tpserve {
namespace {

// "tp,tensor-parallel-size" -> "--tp,--tensor-parallel-size", and the first name.
std::string DashedNames(const std::string& names, std::string* first) {
  std::vector<std::string> dashed;
  for (absl::string_view name : absl::StrSplit(names, ',')) {
    if (dashed.empty()) *first = std::string(name);
    dashed.push_back(absl::StrCat("--", name));
  }
  return absl::StrJoin(dashed, ",");
}

// Where a value came from, for messages: "--tp" or "TPSERVE_TP (--tp)".
std::string Source(const std::string& name, const std::string& env, bool from_env) {
  return from_env ? absl::StrCat(env, " (--", name, ")") : absl::StrCat("--", name);
}

}  // namespace

ArgParser::ArgParser(std::string program, std::string description)
    : program_(std::move(program)),
      owned_app_(std::make_unique<CLI::App>(std::move(description), program_)),
      app_(owned_app_.get()) {
  app_->set_help_flag("-h,--help", "print this help and exit");
}

ArgParser::ArgParser(std::string program, CLI::App* app)
    : program_(std::move(program)), app_(app) {}

ArgParser::~ArgParser() = default;

void ArgParser::Add(const std::string& names, Kind kind, void* dst, std::string help,
                    std::string default_text) {
  Flag& flag = flags_.emplace_back();
  const std::string dashed = DashedNames(names, &flag.name);
  flag.kind = kind;
  flag.dst = dst;
  if (!env_prefix_.empty()) {
    flag.env = absl::AsciiStrToUpper(
        absl::StrCat(env_prefix_, absl::StrReplaceAll(flag.name, {{"-", "_"}})));
    absl::StrAppend(&help, " [env ", flag.env, "]");
  }
  CLI::Option* option;
  if (kind == Kind::kBool) {
    // CLI11 turns --flag into "true" and --flag=VALUE into VALUE; Convert() reads them.
    option = app_->add_flag(dashed, flag.values, help);
  } else {
    // One value per occurrence, every occurrence kept (Convert() takes the last).
    option = app_->add_option(dashed, flag.values, help)
                 ->expected(1)
                 ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
                 ->allow_extra_args(false);
    option->type_name(kind == Kind::kInt      ? "INT"
                      : kind == Kind::kDouble ? "NUMBER"
                                              : "TEXT");
    if (!default_text.empty()) option->default_str(default_text);
  }
}

void ArgParser::AddString(const std::string& names, std::string* dst, const std::string& help) {
  Add(names, Kind::kString, dst, help, *dst);
}
void ArgParser::AddInt(const std::string& names, int64_t* dst, const std::string& help) {
  Add(names, Kind::kInt, dst, help, absl::StrCat(*dst));
}
void ArgParser::AddDouble(const std::string& names, double* dst, const std::string& help) {
  Add(names, Kind::kDouble, dst, help, absl::StrCat(*dst));
}
void ArgParser::AddBool(const std::string& names, bool* dst, const std::string& help) {
  Add(names, Kind::kBool, dst, help, "");
}
void ArgParser::AddRepeated(const std::string& names, std::vector<std::string>* dst,
                            const std::string& help) {
  Add(names, Kind::kRepeated, dst, help, "");
}

void ArgParser::AddPositional(const std::string& name, std::vector<std::string>* dst, int max,
                              const std::string& help) {
  // CLI11 takes any number; Convert() refuses those past `max` by their text.
  app_->add_option(name, *dst, help)->expected(0, CLI::detail::expected_max_vector_size);
  positional_ = dst;
  max_positional_ = max;
}

void ArgParser::SetEnvPrefix(std::string prefix) { env_prefix_ = std::move(prefix); }

void ArgParser::SetVersion(const std::string& text) {
  app_->set_version_flag("--version", text, "print the version and exit");
}

ArgParser& ArgParser::AddCommand(const std::string& name, const std::string& help) {
  CLI::App* sub = app_->add_subcommand(name, help);
  sub->fallthrough();  // the parent's flags may follow the command
  app_->require_subcommand(1);
  commands_.push_back(
      std::unique_ptr<ArgParser>(new ArgParser(absl::StrCat(program_, " ", name), sub)));
  commands_.back()->env_prefix_ = env_prefix_;
  return *commands_.back();
}

absl::StatusOr<ArgParser::Action> ArgParser::Parse(int argc, char** argv) {
  try {
    app_->parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << Help();
    return Action::kExit;
  } catch (const CLI::CallForAllHelp&) {
    std::cout << Help();
    return Action::kExit;
  } catch (const CLI::CallForVersion& e) {
    std::cout << e.what() << "\n";
    return Action::kExit;
  } catch (const CLI::ExtrasError&) {
    return ExtrasError();
  } catch (const CLI::RequiredError& e) {
    // CLI11 checks for a missing command before it reports an unknown flag.
    if (!app_->remaining().empty()) return ExtrasError();
    return absl::InvalidArgumentError(e.what());
  } catch (const CLI::ParseError& e) {
    return absl::InvalidArgumentError(e.what());
  }
  TPSERVE_RETURN_IF_ERROR(Convert());
  return Action::kRun;
}

absl::Status ArgParser::ExtrasError() const {
  std::vector<std::string> extras = app_->remaining();
  for (const ArgParser* p = this; !p->command().empty();) {
    const ArgParser& sub = p->command_parser();
    for (const std::string& e : sub.app_->remaining()) extras.push_back(e);
    p = &sub;
  }
  const std::string first = extras.empty() ? "?" : extras.front();
  if (absl::StartsWith(first, "-")) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown flag ", first.substr(0, first.find('='))));
  }
  return absl::InvalidArgumentError(absl::StrCat("unexpected argument \"", first, "\""));
}

absl::Status ArgParser::Convert() {
  if (positional_ != nullptr && positional_->size() > static_cast<size_t>(max_positional_)) {
    return absl::InvalidArgumentError(
        absl::StrCat("unexpected argument \"", (*positional_)[max_positional_], "\""));
  }
  for (Flag& flag : flags_) {
    bool from_env = false;
    if (flag.values.empty() && !flag.env.empty()) {
      if (const char* value = std::getenv(flag.env.c_str()); value != nullptr) {
        flag.values.push_back(value);
        from_env = true;
      }
    }
    if (flag.values.empty()) continue;
    const std::string& value = flag.values.back();
    const std::string source = Source(flag.name, flag.env, from_env);
    switch (flag.kind) {
      case Kind::kString:
        *static_cast<std::string*>(flag.dst) = value;
        break;
      case Kind::kRepeated: {
        auto* dst = static_cast<std::vector<std::string>*>(flag.dst);
        dst->insert(dst->end(), flag.values.begin(), flag.values.end());
        break;
      }
      case Kind::kInt: {
        int64_t number;  // SimpleAtoi leaves a clamped value behind on overflow
        if (!absl::SimpleAtoi(value, &number)) {
          return absl::InvalidArgumentError(absl::StrCat(
              source, " needs an integer in [-2^63, 2^63), got \"", value, "\""));
        }
        *static_cast<int64_t*>(flag.dst) = number;
        break;
      }
      case Kind::kDouble: {
        double number;
        if (!absl::SimpleAtod(value, &number)) {
          return absl::InvalidArgumentError(
              absl::StrCat(source, " needs a number, got \"", value, "\""));
        }
        *static_cast<double*>(flag.dst) = number;
        break;
      }
      case Kind::kBool:
        if (value == "true" || value == "1") {
          *static_cast<bool*>(flag.dst) = true;
        } else if (value == "false" || value == "0") {
          *static_cast<bool*>(flag.dst) = false;
        } else {
          return absl::InvalidArgumentError(absl::StrCat(
              source, " is true, false, 1 or 0 (or no value: true), got \"", value, "\""));
        }
        break;
    }
    flag.seen = true;
  }
  if (!command().empty()) {
    for (const auto& sub : commands_) {
      if (sub->app_->parsed()) return sub->Convert();
    }
  }
  return absl::OkStatus();
}

bool ArgParser::Seen(const std::string& name) const {
  for (const Flag& f : flags_) {
    if (f.name == name) return f.seen;
  }
  return false;
}

std::string ArgParser::command() const {
  for (const auto& sub : commands_) {
    if (sub->app_->parsed()) return sub->app_->get_name();
  }
  return "";
}

const ArgParser& ArgParser::command_parser() const {
  for (const auto& sub : commands_) {
    if (sub->app_->parsed()) return *sub;
  }
  return *this;
}

std::string ArgParser::Help() const { return app_->help(); }

std::string ArgParser::HelpHint() const {
  const ArgParser& p = command_parser();
  return absl::StrCat("run '", p.program_, " --help' for the flags");
}

absl::Status ParseFlagsOrExit(ArgParser& parser, int argc, char** argv) {
  absl::StatusOr<ArgParser::Action> action = parser.Parse(argc, argv);
  if (action.ok() && *action == ArgParser::Action::kExit) std::exit(0);
  return action.status();
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
