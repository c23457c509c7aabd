// The `chat` command's flags of tpserve-cli and the ChatRequest they describe:
//   chat "message" [--system TEXT] [--messages-file F] [--tools-file F]
//        [--tool-choice auto|none|required|NAME] [--template-kwargs JSON] [sampling flags]
// --messages-file holds earlier turns as OpenAI's messages (a JSON array of {"role",
// "content", "tool_calls", "tool_call_id", "name"}), --tools-file OpenAI's tools (a JSON
// array of {"type": "function", "function": {"name", "description", "parameters"}}).
// The message, when given, is appended as the user's turn; --system goes first.
#ifndef TPSERVE_CLIENT_CHAT_FLAGS_H_
#define TPSERVE_CLIENT_CHAT_FLAGS_H_

#include <string>

#include "absl/status/statusor.h"
#include "base/args.h"
#include "client/generate_flags.h"
#include "tpserve/v1/inference.pb.h"

namespace tpserve {

struct ChatFlags {
  std::string system;
  std::string messages_file;
  std::string tools_file;
  std::string tool_choice;
  std::string template_kwargs;  // a JSON object
  bool interactive = false;     // read user turns from stdin, keep the conversation
};

void AddChatFlags(ArgParser& args, ChatFlags* flags);

// INVALID_ARGUMENT naming the flag (and file) for anything that cannot be sent: no
// message at all, unreadable or malformed files, a message that is not UTF-8.
absl::StatusOr<v1::ChatRequest> BuildChatRequest(const ArgParser& args, const ChatFlags& chat,
                                                 const GenerateFlags& generate,
                                                 const std::string& message);

// Parses OpenAI-shaped messages (a JSON array's text) into `request`; `source` names
// the text in errors.
absl::Status AppendMessagesJson(const std::string& text, const std::string& source,
                                v1::ChatRequest* request);

}  // namespace tpserve

#endif  // TPSERVE_CLIENT_CHAT_FLAGS_H_
