// Chat prompt formats (Llama-3, ChatML/Qwen, Vicuna v1.1, raw) used to turn a conversation into
// the text that is tokenized; see the table in models/tokenizer/README.md.
// Checked by: tests/tokenizer/chat_template_test.cpp (exact strings for a 2-turn conversation).
#pragma once

#include <string>
#include <vector>

namespace specbed {

struct ChatMessage {
  std::string role;  // "system" | "user" | "assistant"
  std::string content;
};

enum class ChatTemplate { kRaw, kLlama3, kChatMl, kVicuna };

// "raw", "llama3", "chatml" (alias "qwen"), "vicuna"; unknown -> specbed::Error listing them.
ChatTemplate ChatTemplateFromName(const std::string& name);
std::string ChatTemplateName(ChatTemplate t);
std::vector<std::string> ChatTemplateNames();  // canonical names (no aliases)

// The prompt text for `messages`. With add_generation_prompt, the text that opens an assistant
// turn is appended. A role other than system/user/assistant throws specbed::Error; Vicuna also
// requires a system message, if any, to come first.
std::string ApplyChatTemplate(ChatTemplate t, const std::vector<ChatMessage>& messages,
                              bool add_generation_prompt);

// True when the template's text already starts with the BOS token (llama3: <|begin_of_text|>),
// so the caller must not add another one.
bool ChatTemplateIncludesBos(ChatTemplate t);

// Strings that end an assistant turn when they appear in generated text.
std::vector<std::string> ChatTemplateStopStrings(ChatTemplate t);

}  // namespace specbed
