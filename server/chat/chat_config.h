// ChatConfig: how a server answers chats — the template, and the parsers that split the
// answers (--chat-template, --tool-call-parser, --reasoning-parser) — shared by the
// OpenAI-compatible API and the gRPC Chat RPC.
#ifndef TPSERVE_SERVER_CHAT_CHAT_CONFIG_H_
#define TPSERVE_SERVER_CHAT_CHAT_CONFIG_H_

#include <string>

#include "server/chat/chat_template.h"
#include "server/chat/tool_call_parser.h"

namespace tpserve {

struct ChatConfig {
  const ChatTemplate* chat_template = nullptr;  // null: chats are refused (the model has none)
  std::string tool_call_parser;  // "" for none: requests with tools need tool_choice "none"
  std::string reasoning_parser;  // "" for none
  IdGenerator tool_call_ids;     // null: random ids (tests fix them)
};

}  // namespace tpserve

#endif  // TPSERVE_SERVER_CHAT_CHAT_CONFIG_H_
