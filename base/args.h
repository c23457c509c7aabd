// ArgParser: the command line of tpserve's binaries, on CLI11 (Debian's libcli11-dev).
//
// Flags are `--name value` or `--name=value` (dashes in names, as in `--token-ids`); a
// flag may have aliases (`AddInt("tp,tensor-parallel-size", ...)`). CLI11 does the
// grammar, `-h/--help` (with each flag's default), `--version` and commands with their
// own help (`tpserve-cli generate --help`); this class converts the values itself, so a
// bad value is InvalidArgument naming the flag and the value (`--tp needs an integer,
// got "x"`), an out-of-range integer is refused instead of clamped, and a value from
// the environment names its variable. Used from main() only.
//
//   ArgParser args("tpserve", "Serves a model over gRPC.");
//   args.SetEnvPrefix("TPSERVE_");         // --max-context also reads TPSERVE_MAX_CONTEXT
//   args.AddInt("port", &port, "port to serve on");
//   TPSERVE_ASSIGN_OR_RETURN(ArgParser::Action action, args.Parse(argc, argv));
//   if (action == ArgParser::Action::kExit) return 0;  // --help or --version printed
#ifndef TPSERVE_BASE_ARGS_H_
#define TPSERVE_BASE_ARGS_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace CLI {
class App;
}  // namespace CLI

namespace tpserve {

class ArgParser {
 public:
  // `program` names the binary in help and messages; `description` heads --help.
  explicit ArgParser(std::string program, std::string description = "");
  ~ArgParser();
  ArgParser(const ArgParser&) = delete;
  ArgParser& operator=(const ArgParser&) = delete;

  // `names` is "name" or "name,alias,...", without dashes; the first is the one
  // messages and Seen() use. The destination's value when registered is the default
  // --help shows; a flag given twice keeps its last value.
  void AddString(const std::string& names, std::string* dst, const std::string& help);
  void AddInt(const std::string& names, int64_t* dst, const std::string& help);
  void AddDouble(const std::string& names, double* dst, const std::string& help);
  // A bool flag takes no value (present means true), or =true/=false/=1/=0.
  void AddBool(const std::string& names, bool* dst, const std::string& help);
  // A repeatable string flag; each occurrence appends one value.
  void AddRepeated(const std::string& names, std::vector<std::string>* dst,
                   const std::string& help);
  // Positional arguments, at most `max` of them, into `dst` (`name` labels them in
  // help). Without this, a positional argument is refused.
  void AddPositional(const std::string& name, std::vector<std::string>* dst, int max,
                     const std::string& help);

  // Flags registered after this also read PREFIX + NAME (upper case, dashes as
  // underscores: TPSERVE_MAX_CONTEXT) when the command line does not give them.
  void SetEnvPrefix(std::string prefix);
  // --version prints `text` and exits.
  void SetVersion(const std::string& text);

  // A command (`tpserve-cli generate`): its own flags and positional arguments, its own
  // --help; this parser's flags are accepted after it too. The returned parser lives as
  // long as this one. With commands, exactly one must be given.
  ArgParser& AddCommand(const std::string& name, const std::string& help);

  enum class Action {
    kRun,   // go on with the flags as parsed
    kExit,  // --help or --version was printed to stdout: exit 0
  };
  // InvalidArgument names the flag (or the environment variable) and what is wrong.
  absl::StatusOr<Action> Parse(int argc, char** argv);

  // Whether flag `name` (its first name) was given, on the command line or in the
  // environment.
  bool Seen(const std::string& name) const;
  // The command given (AddCommand), or "" without commands.
  std::string command() const;
  // The command's parser (command() names one).
  const ArgParser& command_parser() const;
  // The --help text.
  std::string Help() const;
  // "run 'tpserve-cli generate --help' for the flags": what to append to an error.
  std::string HelpHint() const;

 private:
  enum class Kind { kString, kInt, kDouble, kBool, kRepeated };
  struct Flag {
    std::string name;
    Kind kind;
    void* dst;
    std::string env;                  // "" when none
    std::vector<std::string> values;  // as CLI11 collected them
    bool seen = false;
  };
  ArgParser(std::string program, CLI::App* app);
  void Add(const std::string& names, Kind kind, void* dst, std::string help,
           std::string default_text);
  absl::Status Convert();
  // InvalidArgument naming the first argument CLI11 could not place.
  absl::Status ExtrasError() const;

  std::string program_;
  std::unique_ptr<CLI::App> owned_app_;  // the root's; commands use their parent's
  CLI::App* app_;
  std::string env_prefix_;
  std::vector<std::string>* positional_ = nullptr;  // AddPositional's, taking at most
  int max_positional_ = 0;                          // this many
  std::deque<Flag> flags_;  // a deque: CLI11 holds pointers to each Flag's values
  std::vector<std::unique_ptr<ArgParser>> commands_;
};

// For a tool's main(): Parse, and exit(0) right here after --help or --version.
absl::Status ParseFlagsOrExit(ArgParser& parser, int argc, char** argv);

// "1,2,3" -> {1, 2, 3}. InvalidArgument on an empty list or a non-integer element.
absl::Status ParseIdList(const std::string& text, std::vector<int32_t>* ids);

}  // namespace tpserve

#endif  // TPSERVE_BASE_ARGS_H_
