// Chat prompt formats: Llama-3 (Meta's Llama-3 instruct template), ChatML (Qwen2/3), Vicuna v1.1
// (FastChat's "vicuna_v1.1" conversation) and raw. Checked by:
// tests/tokenizer/chat_template_test.cpp.
#include "models/tokenizer/chat_template.h"

#include "base/error.h"
#include "base/names.h"

namespace specbed {
namespace {

constexpr const char* kVicunaSystem =
    "A chat between a curious user and an artificial intelligence assistant. The assistant gives "
    "helpful, detailed, and polite answers to the user's questions.";

void CheckRole(const ChatMessage& m, ChatTemplate t) {
  SPECBED_CHECK(m.role == "system" || m.role == "user" || m.role == "assistant", "chat template '",
                ChatTemplateName(t), "': unknown message role '", m.role,
                "' (expected system, user or assistant)");
}

// Jinja's `trim` (Python str.strip() on ASCII whitespace), applied by Meta's Llama-3 template.
std::string Trim(const std::string& s) {
  const char* ws = " \t\n\r\f\v";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

}  // namespace

ChatTemplate ChatTemplateFromName(const std::string& name) {
  if (name == "raw") return ChatTemplate::kRaw;
  if (name == "llama3") return ChatTemplate::kLlama3;
  if (name == "chatml" || name == "qwen") return ChatTemplate::kChatMl;
  if (name == "vicuna") return ChatTemplate::kVicuna;
  FailUnknownName("chat template", name, {"raw", "llama3", "chatml", "qwen", "vicuna"});
}

std::string ChatTemplateName(ChatTemplate t) {
  switch (t) {
    case ChatTemplate::kRaw:
      return "raw";
    case ChatTemplate::kLlama3:
      return "llama3";
    case ChatTemplate::kChatMl:
      return "chatml";
    case ChatTemplate::kVicuna:
      return "vicuna";
  }
  return "?";
}

std::vector<std::string> ChatTemplateNames() {
  return {"raw", "llama3", "chatml", "vicuna"};
}

std::string ApplyChatTemplate(ChatTemplate t, const std::vector<ChatMessage>& messages,
                              bool add_generation_prompt) {
  for (const auto& m : messages) CheckRole(m, t);
  std::string out;
  switch (t) {
    case ChatTemplate::kRaw:
      // No template: contents joined with "\n" (system included); nothing is appended for the
      // generation prompt.
      for (size_t i = 0; i < messages.size(); ++i) {
        if (i) out += "\n";
        out += messages[i].content;
      }
      break;
    case ChatTemplate::kLlama3:
      // Meta's Llama-3 (3.0) template: bos, then per message
      // "<|start_header_id|>role<|end_header_id|>\n\n" + trim(content) + "<|eot_id|>".
      out = "<|begin_of_text|>";
      for (const auto& m : messages) {
        out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + Trim(m.content) +
               "<|eot_id|>";
      }
      if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      break;
    case ChatTemplate::kChatMl:
      // ChatML as in Qwen2/3: "<|im_start|>role\ncontent<|im_end|>\n" per message. No default
      // system prompt is injected (Qwen2's HF template adds one; pass it explicitly if wanted).
      for (const auto& m : messages) {
        out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
      }
      if (add_generation_prompt) out += "<|im_start|>assistant\n";
      break;
    case ChatTemplate::kVicuna: {
      // FastChat "vicuna_v1.1": SeparatorStyle.ADD_COLON_TWO, roles ("USER", "ASSISTANT"),
      // sep=" ", sep2="</s>":
      //   ret = system + sep
      //   for each (role, message): ret += role + ": " + message + (user ? sep : sep2)
      //   generation prompt (message None): ret += "ASSISTANT:"
      // e.g. "<system> USER: Hi ASSISTANT: Hello!</s>USER: Bye ASSISTANT:"
      // The separator follows the role (FastChat uses the message index parity, the same for
      // alternating user/assistant turns).
      std::string system = kVicunaSystem;
      size_t first = 0;
      if (!messages.empty() && messages[0].role == "system") {
        system = messages[0].content;
        first = 1;
      }
      out = system + " ";
      for (size_t i = first; i < messages.size(); ++i) {
        const auto& m = messages[i];
        SPECBED_CHECK(m.role != "system", "chat template 'vicuna': a system message must be the ",
                      "first message (found one at position ", i, ")");
        if (m.role == "user") {
          out += "USER: " + m.content + " ";
        } else {
          out += "ASSISTANT: " + m.content + "</s>";
        }
      }
      if (add_generation_prompt) out += "ASSISTANT:";
      break;
    }
  }
  return out;
}

bool ChatTemplateIncludesBos(ChatTemplate t) {
  return t == ChatTemplate::kLlama3;
}

std::vector<std::string> ChatTemplateStopStrings(ChatTemplate t) {
  switch (t) {
    case ChatTemplate::kRaw:
      return {};
    case ChatTemplate::kLlama3:
      return {"<|eot_id|>", "<|end_of_text|>"};
    case ChatTemplate::kChatMl:
      return {"<|im_end|>", "<|endoftext|>"};
    case ChatTemplate::kVicuna:
      return {"</s>", "USER:"};
  }
  return {};
}

}  // namespace specbed
